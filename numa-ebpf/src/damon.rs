//! DAMON's view of the same memory: damon:damon_aggregated reports every
//! region of a target at the end of each aggregation interval. Only the
//! kdamond numatrace started (`DAMON_PID`) is recorded: Linux 7.x also
//! runs DAMON_STAT's kdamond, whose regions describe other targets and
//! intervals than numatrace asked for.
use aya_ebpf::{macros::tracepoint, programs::TracePointContext};
use numa_ebpf_common::{DamonEvent, EventKind};

use crate::maps::{emit, now_ns, pid_tgid, setting};

/// The thread id of numatrace's kdamond (0: none, nothing is recorded).
#[no_mangle]
static DAMON_PID: u32 = 0;

/// damon:damon_aggregated: target_id@8, nr_regions@16, start@24, end@32,
/// nr_accesses@40, age@44 (include/trace/events/damon.h; the same on 6.12
/// and 7.x, whose later fields come after age; common header 8 bytes).
/// Userspace checks the format file before it attaches this program.
#[tracepoint]
pub fn tp_damon_aggregated(ctx: TracePointContext) -> u32 {
    let want = setting!(DAMON_PID);
    let tid = pid_tgid() as u32;
    if want == 0 || tid != want {
        return 0;
    }
    // SAFETY: fixed layout of this tracepoint, see above.
    let ev = unsafe {
        DamonEvent {
            kind: EventKind::Damon as u32,
            nr_regions: ctx.read_at::<u32>(16).unwrap_or(0),
            ts_ns: now_ns(),
            target_id: ctx.read_at::<u64>(8).unwrap_or(0),
            start: ctx.read_at::<u64>(24).unwrap_or(0),
            end: ctx.read_at::<u64>(32).unwrap_or(0),
            nr_accesses: ctx.read_at::<u32>(40).unwrap_or(0),
            age: ctx.read_at::<u32>(44).unwrap_or(0),
            kdamond_tid: tid,
            _pad: 0,
        }
    };
    emit(&ev);
    0
}
