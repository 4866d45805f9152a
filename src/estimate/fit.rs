//! Calibration support: fit a [`SizeModel`]'s weights to functions whose compiled size is
//! known, measure its error, and write the weight table as Rust source.
//!
//! Not used by the pass itself; `cargo bench --bench calibrate` compiles the corpora for
//! each target, fits with [`fit`], reports [`Errors`] and, when asked, rewrites
//! `src/estimate/weights.rs` with [`Fitted::render`].
//!
//! The fit is weighted ridge regression, solved exactly (normal equations, Cholesky):
//! - each instruction counts for two columns, its opcode and its (opcode, type class), so
//!   a class seen rarely leans on its opcode's weight (the class column is pulled towards
//!   0), and an opcode seen rarely leans on a prior of a few bytes;
//! - each function's squared error is divided by its size (floored), so that the small
//!   functions merge-similar mostly decides about weigh as much as the large ones.

use std::collections::HashMap;

use cranelift_codegen::ir::{Function, Opcode};

use super::{visit_features, Extra, Feature, SizeModel, TypeClass, CLASSES, EXTRAS};

/// One function's features (each distinct feature once, with its count) and its compiled
/// size in bytes.
#[derive(Clone, Debug)]
pub struct Sample {
    /// The features.
    pub features: Vec<(Feature, f64)>,
    /// The compiled `.text` bytes.
    pub bytes: f64,
    /// How much this sample counts in the fit (1 for most).
    pub weight: f64,
}

/// The features of `func`, each once with its count, in a fixed order.
pub fn features_of(func: &Function) -> Vec<(Feature, f64)> {
    let mut counts: HashMap<Feature, f64> = HashMap::new();
    visit_features(func, &mut |f, n| *counts.entry(f).or_default() += n);
    let mut out: Vec<(Feature, f64)> = counts.into_iter().filter(|(_, n)| *n != 0.0).collect();
    out.sort_by_key(|(f, _)| feature_key(*f));
    out
}

/// A total order on features, for determinism.
fn feature_key(f: Feature) -> usize {
    match f {
        Feature::Intercept => 0,
        Feature::Extra(e) => 1 + e.index(),
        Feature::Op(op, class) => 1 + EXTRAS + op as u8 as usize * CLASSES + class.index(),
    }
}

/// How to fit.
#[derive(Clone, Debug)]
pub struct FitOptions {
    /// Ridge penalty on the intercept and the extra features (towards 0).
    pub ridge_extra: f64,
    /// Ridge penalty on each opcode's weight, towards `op_prior`.
    pub ridge_op: f64,
    /// Ridge penalty on each (opcode, class)'s difference from its opcode, towards 0.
    pub ridge_class: f64,
    /// Bytes an opcode is assumed to take before the data says otherwise; also the weight
    /// of opcodes the samples never show.
    pub op_prior: f64,
    /// Each sample's squared error is divided by `max(bytes, size_floor)`.
    pub size_floor: f64,
}

impl Default for FitOptions {
    fn default() -> Self {
        Self {
            ridge_extra: 1e-3,
            ridge_op: 0.5,
            ridge_class: 0.5,
            op_prior: 4.0,
            size_floor: 16.0,
        }
    }
}

/// A fitted weight table, owned (what `weights.rs` holds as a `WeightTable`).
#[derive(Clone, Debug, PartialEq)]
pub struct Fitted {
    /// Bytes per function.
    pub intercept: f64,
    /// Bytes per extra feature.
    pub extras: [f64; EXTRAS],
    /// Bytes per instruction of an opcode not in `ops`.
    pub default_op: f64,
    /// Per opcode seen: its own weight, and per class (the own weight where the class
    /// was not seen).
    pub ops: Vec<(Opcode, f64, [f64; CLASSES])>,
}

/// A column of the regression.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
enum Column {
    Intercept,
    Extra(usize),
    Op(u8),
    OpClass(u8, usize),
}

impl Fitted {
    /// The model these weights make.
    pub fn model(&self) -> SizeModel {
        SizeModel::from_parts(
            self.intercept,
            self.extras,
            self.default_op,
            self.ops.iter().map(|&(op, _, per_class)| (op, per_class)),
        )
    }

    /// The table as a Rust `static` named `name` (a `WeightTable`), for `weights.rs`.
    pub fn render(&self, name: &str) -> String {
        let mut s = format!("pub(super) static {name}: WeightTable = WeightTable {{\n");
        s += &format!("    intercept: {},\n", num(self.intercept));
        s += "    extras: [\n";
        for e in Extra::ALL {
            s += &format!("        {}, // {e:?}\n", num(self.extras[e.index()]));
        }
        s += "    ],\n";
        s += &format!("    default_op: {},\n", num(self.default_op));
        s += "    ops: &[\n";
        for (op, own, per_class) in &self.ops {
            let classes: Vec<String> = per_class.iter().map(|&w| num(w)).collect();
            s += &format!(
                "        (Opcode::{op:?}, {}, [{}]),\n",
                num(*own),
                classes.join(", ")
            );
        }
        s += "    ],\n};\n";
        s
    }
}

/// A weight as source text: three decimals, always with a point.
fn num(w: f64) -> String {
    format!("{:.3}", if w == 0.0 { 0.0 } else { w })
}

/// Fit weights to `samples`.
pub fn fit(samples: &[Sample], options: &FitOptions) -> Fitted {
    // The columns the samples use, in a fixed order.
    let expand = |f: Feature| -> [Option<Column>; 2] {
        match f {
            Feature::Intercept => [Some(Column::Intercept), None],
            Feature::Extra(e) => [Some(Column::Extra(e.index())), None],
            Feature::Op(op, class) => [
                Some(Column::Op(op as u8)),
                Some(Column::OpClass(op as u8, class.index())),
            ],
        }
    };
    let mut columns: Vec<Column> = Vec::new();
    let mut index: HashMap<Column, usize> = HashMap::new();
    let mut opcodes: HashMap<u8, Opcode> = HashMap::new();
    for s in samples {
        for &(f, _) in &s.features {
            if let Feature::Op(op, _) = f {
                opcodes.insert(op as u8, op);
            }
            for c in expand(f).into_iter().flatten() {
                index.entry(c).or_insert_with(|| {
                    columns.push(c);
                    columns.len() - 1
                });
            }
        }
    }
    let order = |c: &Column| match *c {
        Column::Intercept => (0, 0, 0),
        Column::Extra(e) => (1, e, 0),
        Column::Op(op) => (2, usize::from(op), 0),
        Column::OpClass(op, class) => (3, usize::from(op), class),
    };
    columns.sort_by_key(order);
    for (i, c) in columns.iter().enumerate() {
        index.insert(*c, i);
    }
    let d = columns.len();

    // Normal equations with the ridge terms.
    let mut a = vec![0.0f64; d * d];
    let mut b = vec![0.0f64; d];
    let mut row: Vec<(usize, f64)> = Vec::new();
    for s in samples {
        row.clear();
        for &(f, n) in &s.features {
            for c in expand(f).into_iter().flatten() {
                row.push((index[&c], n));
            }
        }
        let weight = s.weight / s.bytes.max(options.size_floor);
        for &(i, xi) in &row {
            b[i] += weight * xi * s.bytes;
            for &(j, xj) in &row {
                a[i * d + j] += weight * xi * xj;
            }
        }
    }
    for (i, c) in columns.iter().enumerate() {
        let (lambda, prior) = match c {
            Column::Intercept | Column::Extra(_) => (options.ridge_extra, 0.0),
            Column::Op(_) => (options.ridge_op, options.op_prior),
            Column::OpClass(..) => (options.ridge_class, 0.0),
        };
        a[i * d + i] += lambda;
        b[i] += lambda * prior;
    }
    let w = solve_spd(&mut a, &mut b, d);

    // Back to a table.
    let at = |c: Column| index.get(&c).map(|&i| w[i]);
    let mut extras = [0.0; EXTRAS];
    for e in Extra::ALL {
        extras[e.index()] = at(Column::Extra(e.index())).unwrap_or(0.0);
    }
    let mut ops: Vec<(Opcode, f64, [f64; CLASSES])> = Vec::new();
    let mut seen: Vec<u8> = opcodes.keys().copied().collect();
    seen.sort_unstable();
    for op in seen {
        let own = at(Column::Op(op)).unwrap_or(options.op_prior);
        let mut per_class = [own; CLASSES];
        for class in TypeClass::ALL {
            if let Some(delta) = at(Column::OpClass(op, class.index())) {
                per_class[class.index()] = own + delta;
            }
        }
        ops.push((opcodes[&op], own, per_class));
    }
    Fitted {
        intercept: at(Column::Intercept).unwrap_or(0.0),
        extras,
        default_op: options.op_prior,
        ops,
    }
}

/// Solve `a x = b` for a symmetric positive definite `a` (`d`×`d`, row-major) by Cholesky
/// decomposition, in place; returns `x`.
fn solve_spd(a: &mut [f64], b: &mut [f64], d: usize) -> Vec<f64> {
    // a = L Lᵀ, L stored in the lower triangle.
    for j in 0..d {
        let mut diag = a[j * d + j];
        for k in 0..j {
            diag -= a[j * d + k] * a[j * d + k];
        }
        let diag = diag.max(1e-12).sqrt();
        a[j * d + j] = diag;
        for i in j + 1..d {
            let mut v = a[i * d + j];
            for k in 0..j {
                v -= a[i * d + k] * a[j * d + k];
            }
            a[i * d + j] = v / diag;
        }
    }
    // L y = b, then Lᵀ x = y.
    for i in 0..d {
        let mut v = b[i];
        for k in 0..i {
            v -= a[i * d + k] * b[k];
        }
        b[i] = v / a[i * d + i];
    }
    for i in (0..d).rev() {
        let mut v = b[i];
        for k in i + 1..d {
            v -= a[k * d + i] * b[k];
        }
        b[i] = v / a[i * d + i];
    }
    b.to_vec()
}

/// How far estimates are from the truth.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Errors {
    /// Pairs compared.
    pub count: usize,
    /// Mean of |estimate − truth| / truth, in percent.
    pub mean_abs_pct: f64,
    /// Median of the same.
    pub median_abs_pct: f64,
    /// 90th percentile of the same.
    pub p90_abs_pct: f64,
    /// Σ estimate / Σ truth − 1, in percent (the error on a whole module's size).
    pub total_pct: f64,
}

/// The errors of `(estimate, truth)` pairs (truths of 0 are left out).
pub fn errors(pairs: impl IntoIterator<Item = (f64, f64)>) -> Errors {
    let mut rel: Vec<f64> = Vec::new();
    let (mut est, mut truth) = (0.0, 0.0);
    for (e, t) in pairs {
        if t <= 0.0 {
            continue;
        }
        rel.push((e - t).abs() / t * 100.0);
        est += e;
        truth += t;
    }
    if rel.is_empty() {
        return Errors::default();
    }
    rel.sort_by(f64::total_cmp);
    let at = |q: f64| rel[((rel.len() - 1) as f64 * q).round() as usize];
    Errors {
        count: rel.len(),
        mean_abs_pct: rel.iter().sum::<f64>() / rel.len() as f64,
        median_abs_pct: at(0.5),
        p90_abs_pct: at(0.9),
        total_pct: (est / truth - 1.0) * 100.0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Samples whose sizes are an exact linear function of their features: the fit must
    /// find the weights again (up to the small ridge pull).
    #[test]
    fn fit_recovers_known_weights() {
        let ops = [
            (Opcode::Iadd, TypeClass::I64, 3.0),
            (Opcode::Iadd, TypeClass::Narrow, 2.0),
            (Opcode::Load, TypeClass::I64, 4.0),
            (Opcode::Call, TypeClass::None, 5.0),
            (Opcode::Iconst, TypeClass::I64, 10.0),
        ];
        let extras = [(Extra::Blocks, 6.0), (Extra::CallArgs, 3.0)];
        let intercept = 20.0;
        let mut samples = Vec::new();
        let mut state = 0x2545_f491_4f6c_dd1du64;
        let mut next = |n: u64| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state % n) as f64
        };
        for _ in 0..400 {
            let mut features = vec![(Feature::Intercept, 1.0)];
            let mut bytes = intercept;
            for &(op, class, w) in &ops {
                let n = next(12);
                if n > 0.0 {
                    features.push((Feature::Op(op, class), n));
                    bytes += w * n;
                }
            }
            for &(e, w) in &extras {
                let n = next(5);
                if n > 0.0 {
                    features.push((Feature::Extra(e), n));
                    bytes += w * n;
                }
            }
            samples.push(Sample {
                features,
                bytes,
                weight: 1.0,
            });
        }
        let options = FitOptions {
            ridge_extra: 1e-6,
            ridge_op: 1e-6,
            ridge_class: 1e-6,
            ..FitOptions::default()
        };
        let fitted = fit(&samples, &options);
        let model = fitted.model();
        assert!((fitted.intercept - intercept).abs() < 0.05, "{fitted:?}");
        for &(op, class, w) in &ops {
            let got = model.weight(Feature::Op(op, class));
            assert!((got - w).abs() < 0.05, "{op:?} {class:?}: {got} for {w}");
        }
        for &(e, w) in &extras {
            let got = model.weight(Feature::Extra(e));
            assert!((got - w).abs() < 0.05, "{e:?}: {got} for {w}");
        }
        // An opcode the samples never show gets the prior.
        assert_eq!(
            model.weight(Feature::Op(Opcode::Fdiv, TypeClass::Float)),
            options.op_prior
        );
        let errs = errors(samples.iter().map(|s| {
            let est: f64 = s.features.iter().map(|&(f, n)| model.weight(f) * n).sum();
            (est, s.bytes)
        }));
        assert!(errs.mean_abs_pct < 0.5, "{errs:?}");
    }

    #[test]
    fn errors_are_relative_to_the_truth() {
        let e = errors([(110.0, 100.0), (90.0, 100.0), (50.0, 100.0), (1.0, 0.0)]);
        assert_eq!(e.count, 3);
        assert!((e.mean_abs_pct - 70.0 / 3.0).abs() < 1e-9);
        assert!((e.median_abs_pct - 10.0).abs() < 1e-9);
        assert!((e.total_pct - (250.0 / 300.0 - 1.0) * 100.0).abs() < 1e-9);
    }
}
