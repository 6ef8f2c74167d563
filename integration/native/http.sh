#!/usr/bin/env bash
# curl fetching files from python3 -m http.server, plainly and with both under ferry:
# every byte identical.
. "$(dirname "$0")/lib.sh"

mkdir -p "$work/www"
head -c 5000000 /dev/urandom > "$work/www/big.bin"
head -c 777 /dev/urandom > "$work/www/small.bin"
for mode in plain ferry; do
  port=$(free_port)
  bg "$mode" "server-$mode" "$PY" -m http.server --bind 127.0.0.1 --directory "$work/www" "$port"
  server=$last_pid
  wait_listening "$port"
  for f in big.bin small.bin; do
    run "$mode" "curl-$mode" curl -sS --fail -o "$work/$mode-$f" "http://127.0.0.1:$port/$f" || fail "$mode: curl $f failed"
    cmp -s "$work/www/$f" "$work/$mode-$f" || fail "$mode: $f differs"
  done
  run "$mode" "curl-$mode" curl -sS -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/missing" > "$work/code-$mode"
  [ "$(cat "$work/code-$mode")" = 404 ] || fail "$mode: expected 404, got $(cat "$work/code-$mode")"
  stop "$server" INT
  echo "$mode: 2 files intact, 404 as expected"
done
expect_tcp_bytes curl-ferry
expect_tcp_bytes server-ferry
echo PASS
