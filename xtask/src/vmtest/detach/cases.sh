echo 2 > /proc/sys/kernel/numa_balancing
mkdir -p /run
state=/run/numatrace/promoter.json
numatrace workload hot-chunks --slow-mb 32 --chunk-mb 8 --accesses 4000 --duration 600 --summary /dev/null > /dev/null 2>&1 &
load=$!
# ours: how many of numatrace's objects `doctor --loaded` lists
ours() { numatrace doctor --loaded --json | grep -c '"numatrace": true'; }
# case NAME SIGNAL (empty: the test panic)
case_() {
	if [ -z "$2" ]; then
		NUMATRACE_TEST_PANIC_AFTER_S=6 numatrace promote --all --duration 60 > "$1.out" 2>&1 &
	else
		numatrace promote --all --duration 60 > "$1.out" 2>&1 &
	fi
	pid=$!
	# Wait for this run's own state file (a SIGKILLed run leaves its own).
	mine() { grep -q "\"pid\": *$pid[^0-9]" $state 2>/dev/null; }
	i=0; while ! mine && [ $i -lt 150 ]; do sleep 0.2; i=$((i+1)); done
	mine && echo 1 > "$1.state-during" || echo 0 > "$1.state-during"
	numatrace doctor --loaded --json > "$1.during.json"
	[ -n "$2" ] && kill -"$2" $pid
	wait $pid; echo $? > "$1.rc"
	echo "$1 $(cat /proc/uptime)" >> times
	# The kernel frees objects after an RCU grace period: poll a little.
	i=0; while [ "$(ours)" != 0 ] && [ $i -lt 20 ]; do sleep 0.5; i=$((i+1)); done
	numatrace doctor --loaded --json > "$1.after.json"
	[ -e $state ] && echo 1 > "$1.state-after" || echo 0 > "$1.state-after"
}
