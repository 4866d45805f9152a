//! A guard for calls into Cranelift that may panic on input it assumes valid.
//!
//! cranelift-reader, the verifier and code generation assert things about their input
//! instead of reporting them. clif-merge promises that no input makes it panic, so those
//! calls run inside [`unpanicked`], which turns a panic into an error message (and keeps
//! the panic message off standard error for that thread only). This relies on the default
//! `panic = "unwind"`.

/// Run `f`, turning a panic into its message: Cranelift's reader and verifier panic on
/// some malformed input instead of returning an error. The panic hook stays silent for
/// panics on this thread while `f` runs.
pub(crate) fn unpanicked<T>(f: impl FnOnce() -> T) -> Result<T, String> {
    use std::cell::Cell;
    use std::panic;
    thread_local!(static SILENT: Cell<bool> = const { Cell::new(false) });
    static HOOK: std::sync::Once = std::sync::Once::new();
    HOOK.call_once(|| {
        let previous = panic::take_hook();
        panic::set_hook(Box::new(move |info| {
            if !SILENT.with(Cell::get) {
                previous(info);
            }
        }));
    });
    let was = SILENT.with(|s| s.replace(true));
    let result = panic::catch_unwind(panic::AssertUnwindSafe(f));
    SILENT.with(|s| s.set(was));
    result.map_err(|payload| {
        payload
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| payload.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "unknown error".to_string())
    })
}
