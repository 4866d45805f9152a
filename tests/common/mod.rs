//! Fixture runners shared by the test files: each test file compiles this module on its
//! own and uses only part of it.
#![allow(dead_code)]

pub mod detector;
pub mod merger;
