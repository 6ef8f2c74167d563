# cmake -DEXAMPLE=ferry.conf.example -DOUT=ferry.conf.5 -P man.cmake: the manual page
# ferry.conf(5), made from the example rules file: its opening comment is the
# description, the rest the example. One text, so the page cannot drift from it.
file(STRINGS "${EXAMPLE}" lines)
set(head "")
set(body "")
set(in_head TRUE)
foreach(line IN LISTS lines)
  if(in_head AND NOT line MATCHES "^#")
    set(in_head FALSE)
  endif()
  string(REPLACE "\\" "\\e" line "${line}")
  if(line MATCHES "^[.']")
    set(line "\\&${line}")
  endif()
  if(in_head)
    string(REGEX REPLACE "^# ?" "" line "${line}")
    string(APPEND head "${line}\n")
  else()
    string(APPEND body "${line}\n")
  endif()
endforeach()
file(WRITE "${OUT}" ".TH FERRY.CONF 5 \"\" \"ferry\" \"File Formats\"
.SH NAME
ferry.conf \\- which connections ferry moves to RDMA
.SH DESCRIPTION
.nf
${head}.fi
.SH EXAMPLE
.nf
${body}.fi
.SH FILES
.I /etc/ferry/ferry.conf
(or the file
.B FERRY_RULES
names)
.SH SEE ALSO
.BR ferry (1)
")
