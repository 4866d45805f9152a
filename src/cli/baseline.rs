//! Reading the baseline of `--compare`: an earlier run's `--report` JSON.
//!
//! A report names its [`FORMAT_VERSION`]; a baseline without one (written before reports
//! had it) or with another is refused with a message that names the file and says what to
//! do, rather than compared field by field and misread.

use std::path::Path;

use clif_merge::report::{Report, FORMAT_VERSION};

/// The report in `path`, or a message naming the file and what is wrong with it.
pub fn read(path: &Path) -> Result<Report, String> {
    let name = path.display();
    let text = std::fs::read_to_string(path).map_err(|e| format!("--compare {name}: {e}"))?;
    let value: serde_json::Value = serde_json::from_str(&text)
        .map_err(|e| format!("--compare {name}: not a JSON report: {e}"))?;
    let again = "make the baseline again with this clif-merge (--report)";
    match value.get("format_version") {
        None if value.get("groups").is_some() => {
            return Err(format!(
                "--compare {name}: a report of an older clif-merge (it has no format_version; this one reads format {FORMAT_VERSION}): {again}"
            ))
        }
        None => {
            return Err(format!(
                "--compare {name}: not a clif-merge report (no format_version): {again}"
            ))
        }
        Some(v) if v.as_u64() != Some(u64::from(FORMAT_VERSION)) => {
            return Err(format!(
                "--compare {name}: report format {v}, and this clif-merge reads format {FORMAT_VERSION}: {again}"
            ))
        }
        Some(_) => {}
    }
    serde_json::from_value(value).map_err(|e| {
        format!("--compare {name}: not a valid report of format {FORMAT_VERSION}: {e}")
    })
}
