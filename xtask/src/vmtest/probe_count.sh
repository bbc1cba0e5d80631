echo 2 > /proc/sys/kernel/numa_balancing
numatrace stats --live --bpf-stats --json -- numatrace workload hot-chunks --slow-mb 64 --chunk-mb 8 --accesses 4000 --duration 6 --summary "$RESULTS/workload.json" > "$RESULTS/stats.json"
numatrace stats --live --empty-programs --bpf-stats --json -- numatrace workload hot-chunks --slow-mb 64 --chunk-mb 8 --accesses 4000 --duration 6 --summary "$RESULTS/empty-workload.json" > "$RESULTS/empty.json"
mkdir -p /sys/fs/cgroup/nt/child /sys/fs/cgroup/other
sh -c 'echo $$ > /sys/fs/cgroup/nt/child/cgroup.procs && exec numatrace stats --live --json --cgroup /sys/fs/cgroup/nt -- numatrace workload hot-chunks --slow-mb 32 --chunk-mb 8 --accesses 2000 --duration 4 --summary "$RESULTS/cgroup-parent-workload.json"' > "$RESULTS/cgroup-parent.json"
sh -c 'echo $$ > /sys/fs/cgroup/nt/child/cgroup.procs && exec numatrace stats --live --json --cgroup /sys/fs/cgroup/other -- numatrace workload hot-chunks --slow-mb 32 --chunk-mb 8 --accesses 2000 --duration 4 --summary "$RESULTS/cgroup-other-workload.json"' > "$RESULTS/cgroup-other.json"
