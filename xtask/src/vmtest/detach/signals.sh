for c in TERM HUP; do case_ "$c" "$c"; done
kill $load
# 6.1 has no DAMON: --truth damon is refused with that reason.
numatrace stats --live --truth damon --duration 1 > damon.out 2>&1; echo $? > damon.rc
