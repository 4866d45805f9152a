//! Where a register thunk's arguments travel: which argument register, or where in the
//! stack argument area, and how far the thunk must grow that area for its body.
//!
//! The rule is Cranelift's own for the kinds a register thunk passes (cranelift-codegen
//! 0.135.8, `compute_arg_locs` in `isa/x64/abi.rs` and `isa/aarch64/abi.rs`): integers
//! take the convention's integer argument registers in order, floats and vectors its
//! vector registers, each class counted on its own; an argument that finds none left
//! takes a stack slot of its size but at least 8 bytes, aligned to that size, after the
//! slots before it; the area is rounded up to 16 bytes. Both targets agree on this; each
//! says how many registers of each class it has and which floats and vectors they take
//! ([`Registers`]).
//!
//! The body's parameters are the thunk's own followed by the added values, and the rule
//! places parameters in order, so the own ones sit in the body's signature exactly where
//! they sit in the thunk's. Only the added values need placing, and when some of them
//! land beyond the thunk's own stack area the body's area is larger: the thunk grows it
//! ([`Placement::grow`]), moving what lies at the bottom of the stack (the return address
//! on x86_64, the own stack arguments on both) down by the difference. Only the `tail`
//! convention allows that: its callee pops its stack arguments, so the body pops the grown
//! area and returns to the thunk's caller with the stack pointer where that caller
//! expects it (Cranelift grows the area of a `return_call` the same way, in a frame).
//! Under System V the caller pops what it pushed, so a thunk there may only add values
//! that fit in registers or in the padding of the area it was given.

use cranelift_codegen::ir;
use cranelift_codegen::isa::CallConv;

use super::shape::{argument_kind, ArgumentKind, Shape};

/// Where an argument travels.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Location {
    /// The convention's n-th integer argument register.
    Integer(u8),
    /// A float and vector register.
    Vector,
    /// The stack argument area, at this offset from its bottom.
    Stack(u32),
}

/// A target's argument registers under one convention.
pub struct Registers {
    /// How many integer registers carry arguments.
    pub integers: u8,
    /// How many float and vector registers carry arguments.
    pub vectors: u8,
    /// Which float and vector types travel in those registers (and on the stack past
    /// them); a thunk whose signature has another is left to Cranelift.
    pub takes_vector: fn(ir::Type) -> bool,
}

/// The largest stack argument area a written thunk handles: what one `sub` with a 12-bit
/// immediate reaches on aarch64 (and every slot in it one `ldr`/`str` offset away), far
/// beyond any signature seen in practice.
pub const LARGEST_AREA: u32 = 4080;

/// Where a thunk's body finds each argument, and how the thunk makes it so.
pub struct Placement {
    /// Where each of the body's parameters travels.
    pub locations: Vec<Location>,
    /// The bytes of the thunk's own stack argument area (a multiple of 16).
    pub own_area: u32,
    /// How many bytes the thunk adds below its own area (a multiple of 16): the body's
    /// area less the thunk's.
    pub grow: u32,
}

/// Where `params` travel with `registers`, and the bytes of their stack area; `None` when
/// one is of a kind a register thunk does not pass.
fn locations(params: &[ir::AbiParam], registers: &Registers) -> Option<(Vec<Location>, u32)> {
    let (mut integers, mut vectors, mut stack) = (0u8, 0u8, 0u32);
    let mut out = Vec::with_capacity(params.len());
    for p in params {
        let ty = p.value_type;
        let in_register = match argument_kind(p)? {
            ArgumentKind::Integer if integers < registers.integers => {
                integers += 1;
                Some(Location::Integer(integers - 1))
            }
            ArgumentKind::FloatOrVector(ty) if !(registers.takes_vector)(ty) => return None,
            ArgumentKind::FloatOrVector(_) if vectors < registers.vectors => {
                vectors += 1;
                Some(Location::Vector)
            }
            ArgumentKind::Integer | ArgumentKind::FloatOrVector(_) => None,
        };
        out.push(in_register.unwrap_or_else(|| {
            let size = ty.bytes().max(8);
            stack = stack.next_multiple_of(size);
            stack += size;
            Location::Stack(stack - size)
        }));
    }
    Some((out, stack.next_multiple_of(16)))
}

impl Placement {
    /// The placement of `shape`'s arguments with `registers`, or `None` when the thunk
    /// cannot be written without a frame: an argument of a kind it does not pass, a
    /// convention whose callee does not pop its stack arguments when the area must grow,
    /// or a body's area larger than [`LARGEST_AREA`]. Growing is asked for only where the
    /// target's unwind information can say so (`may_grow`).
    pub fn of(shape: &Shape, registers: &Registers, may_grow: bool) -> Option<Placement> {
        let params = &shape.signature.params;
        let (_, own_area) = locations(&params[..shape.own], registers)?;
        let (locations, area) = locations(params, registers)?;
        let grow = area - own_area;
        let pops_its_arguments = shape.signature.call_conv == CallConv::Tail;
        if area > LARGEST_AREA || (grow > 0 && !(may_grow && pops_its_arguments)) {
            return None;
        }
        Some(Placement {
            locations,
            own_area,
            grow,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::emit::thunk::x86_64::REGISTERS as X86_64;

    fn params(types: &[ir::Type]) -> Vec<ir::AbiParam> {
        types.iter().map(|&t| ir::AbiParam::new(t)).collect()
    }

    /// Integers past the registers take 8-byte slots whatever their width; a vector on
    /// the stack is aligned to 16 bytes; floats count apart from integers; the area is
    /// rounded up to 16.
    #[test]
    fn stack_slots_follow_cranelifts_rule() {
        use ir::types::{F64, I32, I64, I8, I8X16};
        let mut types = vec![I64; 6];
        types.extend([I8, F64, I32, I8X16, I64]);
        let (placed, area) = locations(&params(&types), &X86_64).unwrap();
        assert_eq!(
            placed[5..],
            [
                Location::Integer(5),
                Location::Stack(0),
                Location::Vector,
                Location::Stack(8),
                Location::Vector,
                Location::Stack(16),
            ]
        );
        assert_eq!(area, 32);
        let mut types = vec![F64; 8];
        types.extend([I64, I8X16, F64]);
        let (placed, area) = locations(&params(&types), &X86_64).unwrap();
        assert_eq!(
            placed[8..],
            [
                Location::Integer(0),
                Location::Stack(0),
                Location::Stack(16)
            ]
        );
        assert_eq!(area, 32);
    }
}
