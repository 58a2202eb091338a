//! What starts runs: every due slot through the job's controls (`jobctl`: pause, skip,
//! defer), chained jobs (`chains`) and slots missed while the server was down (`missed`).

pub(crate) mod chains;
pub(crate) mod jobctl;
pub(crate) mod missed;
