//! Every use of a merged body dominated by its definition again, where blocks on one side
//! only (or paired blocks whose terminators go to other blocks) made the body's control
//! flow the union of the two members'.
//!
//! In each member a value's definition dominates its uses. In the body, a block may be
//! reached along edges of both members: a path that runs the right member's edges up to
//! a paired block and the left member's from there may skip a block that defines a left
//! value, so Cranelift's verifier (rightly) rejects the use. No call ever takes such a
//! path, since the identifier stays what the thunk passed and each branch on it follows
//! one member throughout, but SSA needs every path. So the value is carried as a block
//! parameter (the textbook SSA construction for one variable): each block where it is
//! read without being dominated gets a parameter, each predecessor passes the value where
//! the definition dominates its branch, its own parameter otherwise, and a zero of the
//! value's type comes from the entry block, whose only paths into the block are the other
//! member's (SalSSA, PLDI 2020, repairs merged SSA the same way).
//!
//! Why the member's path reads the right value: along a path the member takes, the
//! definition runs before the use (it dominates it in the member), and from the definition
//! on every edge passes the value itself or a parameter that received it on the edge
//! before. The zero only flows along paths of the other member, or before the definition
//! has run, where nothing reads it.

use cranelift_codegen::cursor::{Cursor, FuncCursor};
use cranelift_codegen::dominator_tree::DominatorTree;
use cranelift_codegen::flowgraph::ControlFlowGraph;
use cranelift_codegen::ir::{self, types, Block, Function, Inst, InstBuilder, Value};
use cranelift_codegen::ir::{ProgramPoint, Type};
use rustc_hash::FxHashMap;

/// Make every use in `func` dominated by its definition, as the module docs say; `None`
/// when a value needs a zero that cannot be written (vectors, `i128`) or the entry block
/// is a branch target (its parameters are the signature's).
pub fn repair(func: &mut Function) -> Option<()> {
    let cfg = ControlFlowGraph::with_function(func);
    let domtree = DominatorTree::with_function(func, &cfg);
    let mut undominated: Vec<(Value, Inst)> = Vec::new();
    for block in func.layout.blocks() {
        for inst in func.layout.block_insts(block) {
            for v in func.dfg.inst_values(inst) {
                let v = func.dfg.resolve_aliases(v);
                if !domtree.dominates(definition(func, v)?, inst, &func.layout) {
                    undominated.push((v, inst));
                }
            }
        }
    }
    if undominated.is_empty() {
        return Some(());
    }
    undominated.sort_unstable();
    undominated.dedup();
    let entry = func.layout.entry_block()?;
    if cfg.pred_iter(entry).next().is_some() {
        return None;
    }
    let mut zeros: FxHashMap<Type, Value> = FxHashMap::default();
    for uses in undominated.chunk_by(|a, b| a.0 == b.0) {
        let v = uses[0].0;
        let definition = definition(func, v)?;
        let mut flow = Flow::default();
        let mut work: Vec<Block> = Vec::new();
        for &(_, inst) in uses {
            let block = func.layout.inst_block(inst)?;
            flow.need(block, entry, &mut work);
        }
        // Where the value comes from along each edge into a block that needs it.
        while let Some(block) = work.pop() {
            let mut incoming = Vec::new();
            for pred in cfg.pred_iter(block) {
                let source = if domtree.dominates(definition, pred.inst, &func.layout) {
                    Source::Value
                } else {
                    flow.need(pred.block, entry, &mut work)
                };
                incoming.push((pred.inst, source));
            }
            flow.incoming.insert(block, incoming);
        }
        flow.simplify();
        // The parameters left, then the arguments every edge passes, then the uses.
        let ty = func.dfg.value_type(v);
        let mut params: FxHashMap<Block, Value> = FxHashMap::default();
        for &block in &flow.order {
            if !flow.replaced.contains_key(&block) {
                params.insert(block, func.dfg.append_block_param(block, ty));
            }
        }
        let mut value_of = |func: &mut Function, source: Source| -> Option<Value> {
            match flow.resolve(source) {
                Source::Value => Some(v),
                Source::Zero => zero(func, entry, ty, &mut zeros),
                Source::Param(block) => params.get(&block).copied(),
            }
        };
        for &block in &flow.order {
            if flow.replaced.contains_key(&block) {
                continue;
            }
            for &(inst, source) in &flow.incoming[&block] {
                let passed = value_of(func, source)?;
                let dfg = &mut func.dfg;
                for call in dfg.insts[inst]
                    .branch_destination_mut(&mut dfg.jump_tables, &mut dfg.exception_tables)
                {
                    if call.block(&dfg.value_lists) == block {
                        call.append_argument(passed, &mut dfg.value_lists);
                    }
                }
            }
        }
        for &(_, inst) in uses {
            let block = func.layout.inst_block(inst)?;
            let here = value_of(func, Source::Param(block))?;
            // The builder makes no aliases: a use of `v` names `v`.
            func.dfg
                .map_inst_values(inst, |x| if x == v { here } else { x });
        }
    }
    Some(())
}

/// Where `v` is defined.
fn definition(func: &Function, v: Value) -> Option<ProgramPoint> {
    match func.dfg.value_def(v) {
        ir::ValueDef::Result(inst, _) => Some(inst.into()),
        ir::ValueDef::Param(block, _) => Some(block.into()),
        ir::ValueDef::Union(..) => None,
    }
}

/// Where a carried value comes from on an edge.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Source {
    /// The value itself: its definition dominates the branch.
    Value,
    /// A zero: the edge leaves the entry block, which the definition does not dominate.
    Zero,
    /// The parameter of the block the edge leaves.
    Param(Block),
}

/// The blocks one value is carried through.
#[derive(Default)]
struct Flow {
    /// Blocks that need the value at their start, in the order first needed.
    order: Vec<Block>,
    /// What each such block's predecessors pass (branch, source).
    incoming: FxHashMap<Block, Vec<(Inst, Source)>>,
    /// Blocks whose parameter would always hold one source: that source instead.
    replaced: FxHashMap<Block, Source>,
}

impl Flow {
    /// The source at the start of `block`, which the definition does not dominate: its
    /// parameter (queued for its predecessors when new), or a zero in the entry block.
    fn need(&mut self, block: Block, entry: Block, work: &mut Vec<Block>) -> Source {
        if block == entry {
            return Source::Zero;
        }
        if let std::collections::hash_map::Entry::Vacant(e) = self.incoming.entry(block) {
            e.insert(Vec::new());
            self.order.push(block);
            work.push(block);
        }
        Source::Param(block)
    }

    /// `source` with replaced parameters followed.
    fn resolve(&self, mut source: Source) -> Source {
        while let Source::Param(block) = source {
            match self.replaced.get(&block) {
                Some(&s) => source = s,
                None => break,
            }
        }
        source
    }

    /// Replace every parameter whose edges all pass one source (or the parameter itself,
    /// around a loop) by that source, until none is left (Braun et al., CC 2013: such a
    /// phi is trivial, the one source reaches the block on every path).
    fn simplify(&mut self) {
        loop {
            let mut changed = false;
            for &block in &self.order {
                if self.replaced.contains_key(&block) {
                    continue;
                }
                let mut only = None;
                let mut trivial = true;
                for &(_, source) in &self.incoming[&block] {
                    let source = self.resolve(source);
                    if source == Source::Param(block) || only == Some(source) {
                        continue;
                    }
                    if only.is_some() {
                        trivial = false;
                        break;
                    }
                    only = Some(source);
                }
                if trivial {
                    // A block that only its own parameter reaches is never entered.
                    self.replaced.insert(block, only.unwrap_or(Source::Zero));
                    changed = true;
                }
            }
            if !changed {
                return;
            }
        }
    }
}

/// A zero of `ty` at the top of the entry block (one per type, kept in `zeros`): it
/// dominates every block. `None` for a type without one here (vectors, `i128`).
pub(super) fn zero(
    func: &mut Function,
    entry: Block,
    ty: Type,
    zeros: &mut FxHashMap<Type, Value>,
) -> Option<Value> {
    if let Some(&z) = zeros.get(&ty) {
        return Some(z);
    }
    let mut pos = FuncCursor::new(func).at_first_insertion_point(entry);
    let z = match ty {
        types::I8 | types::I16 | types::I32 | types::I64 => pos.ins().iconst(ty, 0),
        types::F32 => pos.ins().f32const(0.0),
        types::F64 => pos.ins().f64const(0.0),
        _ => return None,
    };
    zeros.insert(ty, z);
    Some(z)
}

#[cfg(test)]
mod tests {
    use cranelift_codegen::data_value::DataValue;
    use cranelift_codegen::settings;
    use cranelift_interpreter::environment::FunctionStore;
    use cranelift_interpreter::interpreter::{Interpreter, InterpreterState};
    use cranelift_interpreter::step::ControlFlow;

    use super::*;

    fn parse(text: &str) -> Function {
        cranelift_reader::parse_functions(text).unwrap().remove(0)
    }

    fn verifies(func: &Function) -> bool {
        let flags = settings::Flags::new(settings::builder());
        cranelift_codegen::verify_function(func, &flags).is_ok()
    }

    fn run(func: &Function, args: &[DataValue]) -> i64 {
        let mut store = FunctionStore::default();
        store.add(func.name.to_string(), func);
        let mut interpreter =
            Interpreter::new(InterpreterState::default().with_function_store(store));
        match interpreter
            .call_by_name(&func.name.to_string(), args)
            .unwrap()
        {
            ControlFlow::Return(values) => match values[0] {
                DataValue::I64(v) => v,
                ref other => panic!("returned {other:?}"),
            },
            other => panic!("{other:?}"),
        }
    }

    /// As in a body whose control flow is the union of two members': `v2` is defined on
    /// one path only (`block1`, run when `v0` is non-zero) and read in `block4`, reached on
    /// the same condition, but also (statically) through `block2`. Like the members' own
    /// paths, the calls here take only the paths the value is defined on.
    const UNION: &str = "
        function %f(i32, i64) -> i64 {
        block0(v0: i32, v1: i64):
            brif v0, block1, block2
        block1:
            v10 = iconst.i64 5
            v2 = iadd v1, v10
            jump block3
        block2:
            jump block3
        block3:
            brif v0, block4, block5
        block4:
            v11 = iconst.i64 3
            v3 = imul v2, v11
            return v3
        block5:
            return v1
        }";

    /// The same around a loop: `v5` is defined in the loop's body on one path and read
    /// after the loop, on that path only.
    const LOOP: &str = "
        function %g(i32, i64) -> i64 {
        block0(v0: i32, v1: i64):
            v2 = iconst.i64 0
            jump block1(v2)
        block1(v3: i64):
            brif v0, block2, block3
        block2:
            v5 = iadd v3, v1
            jump block4
        block3:
            jump block4
        block4:
            v8 = iconst.i64 1
            v6 = iadd v3, v8
            v9 = iconst.i64 4
            v7 = icmp ult v6, v9
            brif v7, block1(v6), block5
        block5:
            brif v0, block6, block7
        block6:
            return v5
        block7:
            return v3
        }";

    #[test]
    fn undominated_uses_are_carried_and_compute_the_same() {
        for (text, expected) in [(UNION, [(1, 45), (0, 10)]), (LOOP, [(1, 13), (0, 3)])] {
            let before = parse(text);
            assert!(!verifies(&before), "the fixture must need a repair");
            let mut after = before.clone();
            repair(&mut after).expect("repairable");
            assert!(verifies(&after), "{}", after.display());
            for (take, result) in expected {
                let args = [DataValue::I32(take), DataValue::I64(10)];
                assert_eq!(run(&after, &args), result, "{}", after.display());
            }
        }
    }

    #[test]
    fn parameters_that_always_receive_one_value_are_left_out() {
        // In `UNION`, `block3` gets a parameter (`v2` or a zero) and `block4` reads it:
        // `block2`'s would always be the zero, `block4`'s always `block3`'s.
        let mut func = parse(UNION);
        repair(&mut func).unwrap();
        let params = |b: u32| func.dfg.block_params(Block::from_u32(b)).len();
        assert_eq!([params(2), params(3), params(4)], [0, 1, 0]);
    }

    #[test]
    fn a_value_without_a_zero_is_not_repaired() {
        let text = UNION
            .replace("(i32, i64) -> i64", "(i32, i64, i128) -> i64")
            .replace(
                "block0(v0: i32, v1: i64)",
                "block0(v0: i32, v1: i64, v9: i128)",
            )
            .replace(
                "v10 = iconst.i64 5\n            v2 = iadd v1, v10",
                "v2 = iadd v9, v9",
            )
            .replace(
                "v3 = imul v2, v11",
                "v12 = ireduce.i64 v2\n            v3 = imul v12, v11",
            );
        let mut func = parse(&text);
        assert_eq!(repair(&mut func), None);
    }
}
