//! Programs that do nothing, one per attach point of the real ones
//! (`numatrace ... --empty-programs`): what attaching alone costs (the
//! trampoline or tracepoint call and the program's entry and exit), the
//! floor under the real programs' overhead that no code in them can remove.
//! `cargo xtask bench overhead` measures it beside the real programs.
use aya_ebpf::{
    macros::{fentry, fexit, tracepoint},
    programs::{FEntryContext, FExitContext, TracePointContext},
};

macro_rules! empty {
    ($attr:ident, $ctx:ty, $($name:ident),+) => {
        $(
            #[$attr]
            pub fn $name(_ctx: $ctx) -> u32 {
                0
            }
        )+
    };
}

empty!(
    fentry,
    FEntryContext,
    empty_fentry_hint_fault,
    empty_fentry_scan_range,
    empty_fentry_fault_account,
    empty_fentry_thp_fault,
    empty_fentry_thp_scan,
    empty_fentry_decision_xchg,
    empty_fentry_fault_count_reset,
    empty_fentry_fault_count_drop
);
empty!(
    fexit,
    FExitContext,
    empty_fexit_decision,
    empty_fexit_scan_range,
    empty_fexit_thp_scan,
    empty_fexit_migrate,
    empty_fexit_demote
);
empty!(
    tracepoint,
    TracePointContext,
    empty_tp_skip_vma,
    empty_tp_migrate_pages,
    empty_tp_thread_exit,
    empty_tp_damon_aggregated
);
