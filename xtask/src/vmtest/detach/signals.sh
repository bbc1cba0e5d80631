for c in TERM HUP; do case_ "$c" "$c"; done
kill $load
