//! What we ship, as shipped: every example of conf/ accepted and installed (`conf`), the
//! configuration reference in step with the parsers (`reference`), and scripts/setup.sh's
//! verdicts on apt's plans (`setup`).

mod conf;
mod reference;
mod setup;
