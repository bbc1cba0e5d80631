echo 2 > /proc/sys/kernel/numa_balancing
ip link set lo up 2>/dev/null || ifconfig lo 127.0.0.1 up || exit 1
S=${SOAK_S:-90}
echo $S > soak_seconds
scrape() { wget -q -O - http://127.0.0.1:9465/metrics 2>/dev/null; }
# One attach at a time (each takes tens of seconds under TCG). stats
# first: its window must open before any workload runs, for its counts to
# equal vmstat's; the exporter next, until it answers.
# Listing the loaded objects while others attach and detach must not fail.
ours() { numatrace doctor --loaded --json 2>> loaded.err | grep -c '"numatrace": true'; }
numatrace stats --live --json --duration $((S + 600)) > stats.json 2> stats.err &
sta=$!
i=0; while [ "$(ours)" = 0 ] && [ $i -lt 120 ]; do sleep 1; i=$((i + 1)); done
numatrace export --listen 127.0.0.1:9465 --per-process 5 --duration $((S + 600)) 2> export.err &
exp=$!
i=0; while ! scrape > /dev/null && [ $i -lt 120 ]; do sleep 1; i=$((i + 1)); done
numatrace shadow --json -o shadow.json --duration $((S + 600)) 2> shadow.err &
sha=$!
numatrace promote --all --duration $((S + 600)) --json -o promote.json 2> promote.err &
pro=$!
# Attached once its state file names its pid.
i=0; while ! grep -q "\"pid\": *$pro[^0-9]" /run/numatrace/promoter.json 2>/dev/null && [ $i -lt 120 ]; do sleep 1; i=$((i + 1)); done
start=$(date +%s)
end=$((start + S))
# Process churn: each run a new pid on the slow node.
( i=0; while [ "$(date +%s)" -lt $end ]; do
numatrace workload hot-chunks --slow-mb 16 --chunk-mb 4 --accesses 2000 --idle-ms 20 --duration 4 --seed $i > /dev/null 2>&1
i=$((i + 1)); echo $i > churned; done ) &
churn=$!
# top --once back to back: an attach, a frame and a detach each time.
( while [ "$(date +%s)" -lt $end ]; do
numatrace top --once > /dev/null 2>> top.err || date +%s >> top.failed; done ) &
tops=$!
while [ "$(date +%s)" -le $end ]; do
	t=$(($(date +%s) - start))
	for p in exp:$exp sha:$sha pro:$pro sta:$sta; do
		pid=${p#*:}
		[ -d /proc/$pid ] || continue
		rss=$(awk '/VmRSS/ {print $2}' /proc/$pid/status)
		cpu=$(awk '{print $14 + $15}' /proc/$pid/stat)
		fds=$(ls /proc/$pid/fd | wc -l)
		echo "$t ${p%%:*} $rss $cpu $fds" >> samples.txt
	done
	series=$(scrape | grep -c '^numatrace_')
	cp /run/numatrace/promoter.json state.tmp 2>/dev/null
	field() { sed -n "s/.*\"$1\": *\([0-9]*\).*/\1/p" state.tmp 2>/dev/null; }
	queue=$(field queue_depth)
	entries=$(field scan_index_entries)
	procs=$(field scan_index_processes)
	echo "$t ${series:-0} ${queue:-0} ${entries:-0} ${procs:-0}" >> global.txt
	ours > /dev/null
	sleep 5
done
wait $churn $tops
for p in $exp $sha $pro $sta; do kill -INT $p 2>/dev/null; done
wait $exp; echo $? > export.rc
wait $sha; echo $? > shadow.rc
wait $pro; echo $? > promote.rc
wait $sta; echo $? > stats.rc
