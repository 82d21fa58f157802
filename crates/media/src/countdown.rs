//! The countdown fault-injecting test media share: an operation kind fails
//! after a given number of successes, and keeps failing until healed.

/// The countdown of one kind of operation.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) enum Countdown {
    /// Never fails.
    #[default]
    Off,
    /// This many more operations succeed, then failing starts.
    After(u64),
    /// Every operation fails until `heal`.
    Failing,
}

impl Countdown {
    /// Advances by one operation; true when this one fails.
    pub(crate) fn tick(&mut self) -> bool {
        match *self {
            Countdown::Off => false,
            Countdown::After(0) | Countdown::Failing => {
                *self = Countdown::Failing;
                true
            }
            Countdown::After(n) => {
                *self = Countdown::After(n - 1);
                false
            }
        }
    }
}
