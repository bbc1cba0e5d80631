echo 2 > /proc/sys/kernel/numa_balancing
W='numatrace workload hot-chunks'
rec() { name=$1; shift; numatrace -q record -o /tmp/$name.trace --overwrite -- $W "$@" --summary $name-workload.json || exit 1
  numatrace stats /tmp/$name.trace --json > $name.json || exit 1
  numatrace stats /tmp/$name.trace > $name.txt || exit 1; }
rec promoted --slow-mb 32 --chunk-mb 32 --accesses 20000 --duration 8 --min-faults 8192 --max-duration 60
rec unscanned --slow-mb 256 --chunk-mb 16 --late-populate-ms 3000 --idle-threads 64 --accesses 2000 --idle-ms 1000 --duration 30
$W --dram-mb 1400 --slow-mb 0 --duration 900 > /dev/null &
filler=$!
sleep 8
# The kernel adapts its threshold up to twice the setting when few pages
# are candidates; at 1 s that reaches the chunks' revisit time, and the run
# lands on either side. At 50 ms every chunk but the first is refused.
D=/sys/kernel/debug/sched/numa_balancing
old_th=$(cat $D/hot_threshold_ms)
echo 50 > $D/hot_threshold_ms
rec refused --slow-mb 64 --cold-mb 32 --chunk-mb 8 --accesses 20000 --idle-ms 300 --duration 25 --min-faults 16384 --max-duration 120
kill $filler
echo $old_th > $D/hot_threshold_ms
numatrace replay /tmp/refused.trace --json > refused-replay.json || exit 1
# Traces stay in the guest: results travel over the serial console.
rm -f /tmp/promoted.trace /tmp/unscanned.trace /tmp/refused.trace
