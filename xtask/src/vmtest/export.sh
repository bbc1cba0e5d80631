echo 2 > /proc/sys/kernel/numa_balancing
ip link set lo up 2>/dev/null || ifconfig lo 127.0.0.1 up || exit 1
# A stand-in for a running `numatrace promote`: its state file at the
# well-known path, rewritten every second (this shell's pid is alive).
mkdir -p /run/numatrace
( n=0; while :; do n=$((n + 100)); t=$(date +%s)
printf '{"version":1,"pid":%d,"pid_start_ticks":null,"started_unix_s":%d,"updated_unix_s":%d,"dry_run":false,"scope":"pid 1","model":"fault-count","moved_pages":%d,"moved_bytes":%d,"moved_pages_per_s":100.0,"already_on_target":0,"failures":3,"failures_by_status":{"ebusy":3},"queue_depth":42,"queue_overflows":0,"would_move_pages":0,"rate_limit_bytes_per_s":0,"batch_ms":20.0,"batch_pages":64,"move_calls":1,"move_pages_seconds":0.5,"mean_call_ms":null,"rate_waits":0,"floor_waits":0}' $$ $t $t $n $((n * 4096)) > /run/numatrace/.promoter.tmp && mv /run/numatrace/.promoter.tmp /run/numatrace/promoter.json
sleep 1; done ) &
stand_in=$!
numatrace export --listen 127.0.0.1:9464 --per-process 5 --textfile "$RESULTS/numatrace.prom" --interval 1 -- numatrace workload hot-chunks --slow-mb 64 --chunk-mb 8 --accesses 4000 --duration 20 --summary "$RESULTS/workload.json" 2> "$RESULTS/export.err" &
exp=$!
i=0; n=0
while [ $i -lt 18 ] && [ $n -lt 4 ]; do
	sleep 3; i=$((i + 3))
	wget -q -O "$RESULTS/scrape$n.txt" http://127.0.0.1:9464/metrics && n=$((n + 1))
done
wget -q -O "$RESULTS/index.html" http://127.0.0.1:9464/
wait $exp
echo $? > "$RESULTS/export.rc"
kill $stand_in; rm -f /run/numatrace/promoter.json
numatrace hist --by outcome --interval 2 --json --sample 4 -- numatrace workload hot-chunks --slow-mb 64 --chunk-mb 8 --accesses 4000 --duration 10 --summary "$RESULTS/hist-workload.json" > "$RESULTS/hist.json" 2> "$RESULTS/hist.err"
echo $? > "$RESULTS/hist.rc"
