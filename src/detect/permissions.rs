//! Which memory flags only permit optimisation, and the weaker set of two functions'.
//!
//! Cranelift's memory flags (`ir::MemFlagsData`, in cranelift-codegen 0.135.8) are of two
//! kinds. Some change what an access *does*, and must stay exact:
//! - the explicit endianness (`little`, `big`): which bytes a value is made of;
//! - a trap code other than the default `heap_oob`: what a trap reports is part of the
//!   program (a `user1` trap and a `heap_oob` trap are different programs);
//! - the alias region: a name local to the function, which alias analysis only compares
//!   with the function's other regions. It is not a permission: a load with no region is
//!   not "may alias anything" but a region of its own (it is never reloaded across a store
//!   to a named region), so removing a region is unsound. The comparator's hole mode
//!   encodes regions by serial number instead, and a shared body keeps its first member's.
//!
//! The others only *permit* optimisation: each adds undefined behaviour to the access
//! (Cranelift's own words: "the semantics of a program does not change when a flag is
//! removed, but adding a flag will"). These are [`Permissions`]:
//! - `aligned`: the address is naturally aligned;
//! - `readonly`: the memory does not change while the function runs;
//! - `can_move`: the access may be moved wherever its operands are available;
//! - `notrap` of an access that would otherwise trap with `heap_oob`: it never traps.
//!
//! A function that runs correctly with a permission also runs correctly without it, so
//! functions that differ only in permissions can share one body carrying the
//! intersection ([`Permissions::meet`]), as LLVM's function merging intersects poison
//! flags. For the trap: an access that never traps behaves the same whether it would
//! report `heap_oob` or not, so `notrap` meets `heap_oob` as `heap_oob`.

use std::fmt;

use cranelift_codegen::ir::{MemFlagsData, TrapCode};

/// The flags of one memory access that only permit optimisation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Permissions {
    /// `aligned`.
    pub aligned: bool,
    /// `readonly`.
    pub readonly: bool,
    /// `can_move`.
    pub can_move: bool,
    /// `notrap` where the access would trap with `heap_oob` otherwise (false when its
    /// trap code is another: that code is kept exact).
    pub notrap: bool,
}

/// The trap code of `flags` that is not a permission: the raw value of a code other
/// than `heap_oob`, or 0 for `notrap` and `heap_oob` (the permission).
pub fn exact_trap_code(flags: MemFlagsData) -> u8 {
    match flags.trap_code() {
        None | Some(TrapCode::HEAP_OUT_OF_BOUNDS) => 0,
        Some(code) => code.as_raw().get(),
    }
}

impl Permissions {
    /// The permissions `flags` grant.
    pub fn of(flags: MemFlagsData) -> Self {
        Self {
            aligned: flags.aligned(),
            readonly: flags.readonly(),
            can_move: flags.can_move(),
            notrap: flags.trap_code().is_none(),
        }
    }

    /// What both `self` and `other` allow: a body with these flags is correct for a
    /// function granted either.
    pub fn meet(self, other: Self) -> Self {
        Self {
            aligned: self.aligned && other.aligned,
            readonly: self.readonly && other.readonly,
            can_move: self.can_move && other.can_move,
            notrap: self.notrap && other.notrap,
        }
    }

    /// `flags` with these permissions instead of its own, everything else (endianness,
    /// an exact trap code, the alias region) kept.
    pub fn apply(self, flags: MemFlagsData) -> MemFlagsData {
        let mut out = MemFlagsData::new().with_alias_region(flags.alias_region());
        if let Some(endianness) = flags.explicit_endianness() {
            out = out.with_endianness(endianness);
        }
        out = match flags.trap_code() {
            None | Some(TrapCode::HEAP_OUT_OF_BOUNDS) if self.notrap => out.with_notrap(),
            None | Some(TrapCode::HEAP_OUT_OF_BOUNDS) => {
                out.with_trap_code(Some(TrapCode::HEAP_OUT_OF_BOUNDS))
            }
            Some(code) => out.with_trap_code(Some(code)),
        };
        if self.aligned {
            out = out.with_aligned();
        }
        if self.readonly {
            out = out.with_readonly();
        }
        if self.can_move {
            out = out.with_can_move();
        }
        out
    }
}

impl fmt::Display for Permissions {
    /// The permissions granted, as CLIF writes them.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let words: Vec<&str> = [
            (self.notrap, "notrap"),
            (self.aligned, "aligned"),
            (self.readonly, "readonly"),
            (self.can_move, "can_move"),
        ]
        .into_iter()
        .filter_map(|(on, word)| on.then_some(word))
        .collect();
        if words.is_empty() {
            write!(f, "memory flags without permissions")
        } else {
            write!(f, "memory flags {}", words.join(" "))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cranelift_codegen::ir::{AliasRegion, Endianness};
    use cranelift_entity::EntityRef;

    fn every_flags() -> Vec<MemFlagsData> {
        let mut out = Vec::new();
        for bits in 0..8u32 {
            for trap in [
                None,
                Some(TrapCode::HEAP_OUT_OF_BOUNDS),
                Some(TrapCode::unwrap_user(7)),
            ] {
                for endianness in [None, Some(Endianness::Little), Some(Endianness::Big)] {
                    for region in [None, Some(AliasRegion::new(2))] {
                        let mut f = MemFlagsData::new()
                            .with_trap_code(trap)
                            .with_alias_region(region);
                        if let Some(e) = endianness {
                            f = f.with_endianness(e);
                        }
                        for (bit, set) in [
                            (1, MemFlagsData::with_aligned as fn(_) -> _),
                            (2, MemFlagsData::with_readonly),
                            (4, MemFlagsData::with_can_move),
                        ] {
                            if bits & bit != 0 {
                                f = set(f);
                            }
                        }
                        out.push(f);
                    }
                }
            }
        }
        out
    }

    #[test]
    fn a_flags_own_permissions_give_it_back() {
        // `apply` rebuilds the flags from their parts: every part must be read.
        for f in every_flags() {
            assert_eq!(Permissions::of(f).apply(f), f, "{f}");
        }
    }

    #[test]
    fn the_meet_only_removes_permissions() {
        for a in every_flags() {
            for b in every_flags() {
                let m = Permissions::of(a).meet(Permissions::of(b)).apply(a);
                let (pa, pm) = (Permissions::of(a), Permissions::of(m));
                assert!(!pm.aligned || pa.aligned);
                assert!(!pm.readonly || pa.readonly);
                assert!(!pm.can_move || pa.can_move);
                assert!(!pm.notrap || pa.notrap);
                assert_eq!(m.explicit_endianness(), a.explicit_endianness());
                assert_eq!(m.alias_region(), a.alias_region());
                assert_eq!(exact_trap_code(m), exact_trap_code(a));
            }
        }
    }
}
