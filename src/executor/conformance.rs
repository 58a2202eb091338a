//! `saltpeterctl executor test PATH` (filled in by the conformance work).
