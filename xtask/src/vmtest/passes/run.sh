numatrace record -o s.trace --map-budget $budget --duration 600 2> sampled.err &
sampled=$!
i=0; while [ $i -lt 240 ] && [ ! -s s.trace ]; do sleep 0.5; i=$((i + 1)); done
numatrace shadow --json -o shadow.json --record t.trace -- numatrace workload hot-chunks --slow-mb 64 --chunk-mb 64 --accesses 160 --compute-ms 100 --duration 70 --summary workload.json
rc=$?
kill -INT $sampled
wait $sampled
src=$?
echo $old_max > $D/scan_period_max_ms
kill $filler
[ $rc = 0 ] && [ $src = 0 ] || { cat sampled.err; exit 1; }
numatrace stats t.trace --json > stats.json
numatrace stats s.trace --json > sampled-stats.json
numatrace replay t.trace --json > full-replay.json
numatrace replay s.trace --json > sampled-replay.json
