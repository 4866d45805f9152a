//! Running functions in cranelift-interpreter.

use cranelift_codegen::data_value::DataValue;
use cranelift_codegen::ir::immediates::{Ieee32, Ieee64};
use cranelift_codegen::ir::types::*;
use cranelift_codegen::ir::{Function, Signature};

use super::{Rng, INTERESTING_F32, INTERESTING_F64, INTERESTING_INTS};

// ---------------------------------------------------------------------------------------
// Execution.

/// What a call did, comparable across functions (floats by their bits).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    Return(Vec<(String, Vec<u8>)>),
    Trap(String),
    Error(String),
}

fn normalize(v: &DataValue) -> (String, Vec<u8>) {
    let ty = v.ty();
    let mut buf = vec![0u8; ty.bytes() as usize];
    v.clone().write_to_slice_le(&mut buf);
    (ty.to_string(), buf)
}

/// Run `func` on `args` in the interpreter, with the callees available.
pub fn run(func: &Function, callees: &[Function], args: &[DataValue]) -> Outcome {
    use cranelift_interpreter::environment::FunctionStore;
    use cranelift_interpreter::interpreter::{Interpreter, InterpreterState};
    use cranelift_interpreter::step::ControlFlow;
    let mut store = FunctionStore::default();
    for c in callees {
        store.add(c.name.to_string(), c);
    }
    let name = func.name.to_string();
    store.add(name.clone(), func);
    let mut interp = Interpreter::new(InterpreterState::default().with_function_store(store))
        .with_fuel(Some(200_000));
    match interp.call_by_name(&name, args) {
        Ok(ControlFlow::Return(vals)) => Outcome::Return(vals.iter().map(normalize).collect()),
        Ok(ControlFlow::Trap(t)) => Outcome::Trap(format!("{t:?}")),
        Ok(other) => Outcome::Error(format!("unexpected control flow {other:?}")),
        Err(e) => Outcome::Error(format!("{e:?}")),
    }
}

/// Random arguments for `sig`, with a bias towards edge values.
pub fn random_args(rng: &mut Rng, sig: &Signature) -> Vec<DataValue> {
    sig.params
        .iter()
        .map(|p| {
            let raw = if rng.chance(40) {
                rng.pick(INTERESTING_INTS) as u64
            } else if rng.chance(30) {
                rng.below(300) as u64
            } else {
                rng.next_u64()
            };
            match p.value_type {
                I8 => DataValue::I8(raw as i8),
                I16 => DataValue::I16(raw as i16),
                I32 => DataValue::I32(raw as i32),
                I64 => DataValue::I64(raw as i64),
                F32 => DataValue::F32(Ieee32::with_bits(if rng.chance(30) {
                    rng.pick(INTERESTING_F32)
                } else {
                    raw as u32
                })),
                F64 => DataValue::F64(Ieee64::with_bits(if rng.chance(30) {
                    rng.pick(INTERESTING_F64)
                } else {
                    raw
                })),
                ty => panic!("no random argument of type {ty}"),
            }
        })
        .collect()
}
