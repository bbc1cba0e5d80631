case_ INT INT
case_ panic ""
case_ KILL KILL
timeout -s KILL 90 numatrace promote --all --duration 3 > again.out 2>&1; echo $? > again.rc
[ -e $state ] && echo 1 > again.state-after || echo 0 > again.state-after
kill $load
