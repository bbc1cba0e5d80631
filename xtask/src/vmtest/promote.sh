sleep 2
W="numatrace workload hot-chunks --chunk-mb 8 --accesses 20000 --idle-ms 100"
# Each workload waits for "go" so both promoters attach first; exec keeps the pid.
sh -c "while [ ! -e go ]; do sleep 0.2; done; exec $W --slow-mb 128 --duration 45 --seed 1 --summary a.json" &
a=$!
sh -c "while [ ! -e go ]; do sleep 0.2; done; exec $W --slow-mb 64 --duration 45 --seed 2 --summary b.json" &
b=$!
sh -c "while [ ! -e go ]; do sleep 0.2; done; exec $W --slow-mb 32 --duration 60 --seed 3 --summary c.json" &
c=$!
echo "$a $b $c" > pids
node0_free() { awk '/MemFree/ {print $4}' /sys/devices/system/node/node0/meminfo; }
( while :; do node0_free; sleep 0.2; done ) > memfree.txt &
sampler=$!
# A promoter is attached once its state file names its pid (the mover
# starts publishing after the probes are attached).
attached() { i=0; while [ $i -lt 240 ] && ! grep -q "\"pid\": *$2[^0-9]" "$1" 2>/dev/null; do sleep 0.5; i=$((i + 1)); done; }
# The dry run (scope: B) runs until B has exited; its attach shows what a
# promoter's own maps take from node 0.
free0=$(node0_free)
# The dry run publishes its state elsewhere: the well-known path is the real promoter's.
NUMATRACE_PROMOTER_STATE=$PWD/dry-state.json numatrace promote --pid $b --dry-run --duration 300 --ring-mb 8 --json -o dry.json 2> dry.err &
d=$!
attached dry-state.json $d
free1=$(node0_free)
# The floor: 256 MiB of room once the real promoter has attached too; the
# kernel's own promotions of the three workloads take up to about 80 MiB
# of it in some runs.
floor=$((free1 - (free0 - free1) - 256 * 1024))
echo $floor > floor_kb
numatrace promote --pid $a --pid $c --min-free ${floor}KiB --duration 300 --ring-mb 8 --json -o promote.json 2> promote.err &
p=$!
attached /run/numatrace/promoter.json $p
echo $p > promote.pid
# The state file top and export read: sampled every second while it runs.
( while kill -0 $p 2>/dev/null; do cp /run/numatrace/promoter.json state.tmp 2>/dev/null && mv state.tmp state.json; cp dry-state.json dry-state.sample 2>/dev/null; sleep 1; done ) &
touch go
sleep 15
kill -9 $c && echo killed > c.killed
# The promoter is frozen from before A counts its pages on DRAM until A has
# exited: a page moved in between would be in numatrace's count and not in
# A's. A runs 45 s after its setup; the freeze comes at 38 s.
sleep 23
[ -e a.json ] && echo "A had counted its pages before the freeze" > fence.late
kill -STOP $p
all_stopped() { for t in /proc/$p/task/*/stat; do [ "$(sed 's/.*) //' "$t" | cut -d' ' -f1)" = T ] || return 1; done; }
i=0; while [ $i -lt 100 ] && ! all_stopped; do sleep 0.1; i=$((i + 1)); done
all_stopped || echo "the promoter's threads did not stop" > fence.late
# The promoter sees the rest of A's life and stops by itself once A and C
# have both exited; Ctrl-C only if it has not within 30 s (the check then
# fails on the stop reason).
exited() { s=$(sed 's/.*) //' /proc/$1/stat 2>/dev/null | cut -d' ' -f1); [ -z "$s" ] || [ "$s" = Z ]; }
stopped() { i=0; while [ $i -lt 60 ] && ! exited $1; do sleep 0.5; i=$((i + 1)); done; }
wait $a
kill -CONT $p
stopped $p
kill -INT $p 2>/dev/null; wait $p; echo $? > promote.rc
[ -e /run/numatrace/promoter.json ] && echo left > state.left
wait $b
stopped $d
kill -INT $d 2>/dev/null; wait $d; echo $? > dry.rc
kill $sampler
kill $filler
cat promote.err dry.err
