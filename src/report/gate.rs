//! The CI gate: is a [`Comparison`] a size regression?
//!
//! A change regresses when `.text` grew past a threshold, given in bytes (`512`) or as a
//! percentage of the baseline's `.text` (`2%`), or when a fold was lost (a function that
//! shared a body in the baseline no longer does, whatever the bytes say: it is a
//! duplicate the build now carries). Growth up to the threshold passes: `0` fails on any
//! growth. The verdict is one line, for a CI log.

use std::fmt;
use std::str::FromStr;

use super::compare::{signed_with_percent, Comparison, GroupKind};

/// How much `.text` may grow before it is a regression.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Threshold {
    /// Bytes.
    Bytes(u64),
    /// Percent of the baseline's `.text`.
    Percent(f64),
}

impl FromStr for Threshold {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        let bad = || {
            format!(
                "`{text}` is not a threshold: write a number of bytes (512) or a percentage (2%)"
            )
        };
        let t = text.trim();
        match t.strip_suffix('%') {
            // Plain decimals only: no sign, exponent, `inf` or `NaN`.
            Some(p) if p.trim().chars().all(|c| c.is_ascii_digit() || c == '.') => p
                .trim()
                .parse::<f64>()
                .map(Threshold::Percent)
                .map_err(|_| bad()),
            Some(_) => Err(bad()),
            None => t.parse::<u64>().map(Threshold::Bytes).map_err(|_| bad()),
        }
    }
}

impl fmt::Display for Threshold {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Threshold::Bytes(b) => write!(f, "{b} bytes"),
            Threshold::Percent(p) => write!(f, "{p}%"),
        }
    }
}

/// Why a comparison cannot be judged.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum GateError {
    /// One of the runs wrote no object, so there is no `.text` to compare.
    #[error("{0} has no .text size to compare (make it with -o)")]
    NoTextBytes(String),
}

/// The one-line reason `comparison` is a regression under `threshold`, or `None` when it
/// passes.
pub fn regression(
    comparison: &Comparison,
    threshold: Threshold,
) -> Result<Option<String>, GateError> {
    let before = comparison
        .text_bytes_before
        .ok_or_else(|| GateError::NoTextBytes(format!("the baseline {}", comparison.baseline)))?;
    let after = comparison
        .text_bytes_after
        .ok_or_else(|| GateError::NoTextBytes("this run".into()))?;
    let growth = after as i64 - before as i64;
    let past = growth > 0
        && match threshold {
            Threshold::Bytes(b) => growth as u64 > b,
            Threshold::Percent(p) => growth as f64 * 100.0 > p * before as f64,
        };
    let mut reasons = Vec::new();
    if !comparison.lost_folds.is_empty() {
        let first = &comparison.lost_folds[0];
        let what = match first.kind {
            GroupKind::Identical => "folds with",
            GroupKind::Similar => "shares a merge-similar body with",
        };
        let more = match comparison.lost_folds.len() {
            1 => String::new(),
            n => format!(" and {} more", n - 1),
        };
        reasons.push(format!(
            "{} fold(s) lost ({} no longer {what} {}{more})",
            comparison.lost_folds.len(),
            first.function,
            first.was_with
        ));
    }
    if past {
        reasons.push(format!(
            ".text grew {before} -> {after} ({}), past the threshold of {threshold}",
            signed_with_percent(before, after)
        ));
    }
    Ok((!reasons.is_empty()).then(|| format!("size regression: {}", reasons.join("; "))))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thresholds_parse_as_bytes_or_percent() {
        assert_eq!("512".parse(), Ok(Threshold::Bytes(512)));
        assert_eq!(" 0 ".parse(), Ok(Threshold::Bytes(0)));
        assert_eq!("2%".parse(), Ok(Threshold::Percent(2.0)));
        assert_eq!("0.5 %".parse(), Ok(Threshold::Percent(0.5)));
        for bad in [
            "", "-1", "1.5", "2%%", "abc", "%", "-2%", "inf%", "NaN%", "1e3%", "5kb",
        ] {
            let e = bad.parse::<Threshold>().unwrap_err();
            assert!(e.contains(&format!("`{bad}`")), "{e}");
        }
    }

    fn comparison(before: u64, after: u64) -> Comparison {
        Comparison {
            baseline: "base.json".into(),
            text_bytes_before: Some(before),
            text_bytes_after: Some(after),
            ..Comparison::default()
        }
    }

    #[test]
    fn growth_past_the_threshold_regresses() {
        let c = comparison(1000, 1020);
        assert_eq!(regression(&c, Threshold::Bytes(20)), Ok(None));
        assert!(regression(&c, Threshold::Bytes(19)).unwrap().is_some());
        assert_eq!(regression(&c, Threshold::Percent(2.0)), Ok(None));
        let m = regression(&c, Threshold::Percent(1.9)).unwrap().unwrap();
        assert_eq!(
            m,
            "size regression: .text grew 1000 -> 1020 (+20 bytes, +2.0%), past the threshold of 1.9%"
        );
        // Shrinking never regresses.
        assert_eq!(
            regression(&comparison(1000, 10), Threshold::Bytes(0)),
            Ok(None)
        );
    }

    #[test]
    fn a_lost_fold_regresses_whatever_the_bytes() {
        let mut c = comparison(1000, 900);
        c.lost_folds.push(super::super::compare::LostFold {
            kind: GroupKind::Identical,
            function: "%b".into(),
            was_with: "%a".into(),
            now_in: None,
            first_difference: None,
        });
        let m = regression(&c, Threshold::Percent(50.0)).unwrap().unwrap();
        assert_eq!(
            m,
            "size regression: 1 fold(s) lost (%b no longer folds with %a)"
        );
    }

    #[test]
    fn a_run_without_an_object_cannot_be_judged() {
        let mut c = comparison(1, 1);
        c.text_bytes_before = None;
        let e = regression(&c, Threshold::Bytes(0)).unwrap_err();
        assert_eq!(
            e.to_string(),
            "the baseline base.json has no .text size to compare (make it with -o)"
        );
    }
}
