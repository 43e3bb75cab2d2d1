//! On/off switches of the encoder's choices, for measuring them: each is
//! on unless its environment variable is `0` (read once per process), and
//! a test can force it on or off for its own thread (tests run side by
//! side on one device).

/// Define, in the calling module, `switch_on(also)` — `$var`'s switch and
/// `also()` (a switch it depends on), unless a test forced it on this
/// thread — and, in tests, `force(Option<bool>)`.
macro_rules! env_switch {
    ($var:literal) => {
        #[cfg(test)]
        thread_local! {
            static FORCE: std::cell::Cell<Option<bool>> = const { std::cell::Cell::new(None) };
        }

        /// Turn this switch on or off on this thread (`None`: the
        /// environment's choice), for tests.
        #[cfg(test)]
        pub(crate) fn force(on: Option<bool>) {
            FORCE.with(|f| f.set(on));
        }

        /// Whether the switch is on: forced by a test on this thread, else
        /// `also()` and not `$var=0`.
        fn switch_on(also: impl FnOnce() -> bool) -> bool {
            #[cfg(test)]
            if let Some(on) = FORCE.with(std::cell::Cell::get) {
                return on;
            }
            static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
            also() && *ON.get_or_init(|| !std::env::var($var).is_ok_and(|v| v.trim() == "0"))
        }
    };
}
