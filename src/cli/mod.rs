//! Parts of the `clif-merge` command that only the command line needs.
//!
//! - [`size`]: the size-regression flags (`--top`, `--compare`, `--fail-on-regression`,
//!   `--plot`) and what they add to a run;
//! - [`baseline`]: reading a baseline report, refusing one of another format;
//! - [`plot`]: the SVG of `--plot`.

pub mod baseline;
pub mod plot;
pub mod size;
