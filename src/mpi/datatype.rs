//! Datatypes as pure data: predefined basic types, the MINLOC/MAXLOC pair
//! types, and derived types flattened into a type map of blocks.
//!
//! Contract (see docs/CONTRACTS.md §2):
//! - A `TypeDesc` is immutable once built. Derived constructors take their
//!   children as `&Arc<TypeDesc>` and keep those `Arc`s in the `Combiner`, so
//!   `MPI_Type_get_contents` can hand out new handles to the very same child
//!   descriptions. A child that is predefined has `Combiner::Named`.
//! - The type map is flattened: `blocks()` lists `(disp, basic, count)` runs in
//!   type-map order (the order data is packed in); consecutive runs of the same
//!   basic type that touch in memory are merged.
//! - The packed stream of `count` elements is the data of each block in order,
//!   element after element, in native representation with no padding. The
//!   stream may be cut at any byte (`pack_range`/`unpack_range`).
//! - Bounds follow the standard: a type built with `resized` carries explicit
//!   lb/ub markers; markers win over data in every type built from it. A
//!   struct without markers has its extent rounded up to the largest alignment
//!   of its basic types (the C rule, as MPICH and Open MPI do).
//! - `subarray` and `darray` build their map from hindexed/resized steps but
//!   keep their own combiner; both have lb 0 and the extent of the global array.
//! - Large counts: constructors take `i64` counts (negative ones are errors:
//!   MPI_ERR_COUNT for counts, MPI_ERR_ARG for block lengths). A type made by
//!   an `_c` function is marked with `with_large_counts()`, which only changes
//!   where `contents()` reports the arguments.
//! - Target is x86-64 Linux (LP64): `long` is 8 bytes, `long double` is the
//!   80-bit x87 format in 16 bytes of storage, `wchar_t` is 4 bytes.
//! - `count_of` / `elements_of` answer MPI_Get_count / MPI_Get_elements.
//!
//! Limitation: the map is fully flattened, so a type whose data is in many
//! separate pieces costs about 48 bytes per piece (block, packed offset, run)
//! and at most `MAX_BLOCKS` pieces are allowed (MPI_ERR_NO_MEM beyond).
//! Repetitions that merge into one run (contiguous of a dense type, vectors
//! whose stride equals the block) cost one piece whatever the count. Packing
//! `count` elements never replicates the map.

use crate::mpi::error::MpiResult;
use crate::mpi_bail;
use std::sync::Arc;

/// Kind of a basic type, for the op/type table of reductions.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TypeClass {
    /// C integer and Fortran integer types (incl. MPI_AINT, MPI_OFFSET, MPI_COUNT).
    Integer,
    /// C and Fortran floating point types.
    Floating,
    /// C `_Bool` and Fortran LOGICAL.
    Logical,
    /// C and Fortran complex types.
    Complex,
    /// MPI_BYTE.
    Byte,
    /// MPI_CHAR, MPI_WCHAR, MPI_CHARACTER: no arithmetic.
    Character,
    /// MPI_PACKED.
    Packed,
}

macro_rules! basics {
    ($( $v:ident = $name:literal, $size:literal, $align:literal, $class:ident; )*) => {
        /// Every predefined basic (non-pair) MPI datatype.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub enum Basic { $( $v, )* }

        impl Basic {
            /// All basic types, in declaration order.
            pub const ALL: &'static [Basic] = &[ $( Basic::$v, )* ];

            /// Bytes of storage of one value (also its packed size).
            pub const fn size(self) -> usize {
                match self { $( Basic::$v => $size, )* }
            }
            /// C alignment of the type on x86-64.
            pub const fn align(self) -> usize {
                match self { $( Basic::$v => $align, )* }
            }
            /// The class used by the op/type table.
            pub const fn class(self) -> TypeClass {
                match self { $( Basic::$v => TypeClass::$class, )* }
            }
            /// The MPI name, e.g. "MPI_INT".
            pub const fn name(self) -> &'static str {
                match self { $( Basic::$v => $name, )* }
            }
        }
    };
}

basics! {
    Char = "MPI_CHAR", 1, 1, Character;
    SignedChar = "MPI_SIGNED_CHAR", 1, 1, Integer;
    UnsignedChar = "MPI_UNSIGNED_CHAR", 1, 1, Integer;
    Short = "MPI_SHORT", 2, 2, Integer;
    UnsignedShort = "MPI_UNSIGNED_SHORT", 2, 2, Integer;
    Int = "MPI_INT", 4, 4, Integer;
    Unsigned = "MPI_UNSIGNED", 4, 4, Integer;
    Long = "MPI_LONG", 8, 8, Integer;
    UnsignedLong = "MPI_UNSIGNED_LONG", 8, 8, Integer;
    LongLong = "MPI_LONG_LONG", 8, 8, Integer;
    UnsignedLongLong = "MPI_UNSIGNED_LONG_LONG", 8, 8, Integer;
    Int8 = "MPI_INT8_T", 1, 1, Integer;
    Int16 = "MPI_INT16_T", 2, 2, Integer;
    Int32 = "MPI_INT32_T", 4, 4, Integer;
    Int64 = "MPI_INT64_T", 8, 8, Integer;
    Uint8 = "MPI_UINT8_T", 1, 1, Integer;
    Uint16 = "MPI_UINT16_T", 2, 2, Integer;
    Uint32 = "MPI_UINT32_T", 4, 4, Integer;
    Uint64 = "MPI_UINT64_T", 8, 8, Integer;
    Float = "MPI_FLOAT", 4, 4, Floating;
    Double = "MPI_DOUBLE", 8, 8, Floating;
    LongDouble = "MPI_LONG_DOUBLE", 16, 16, Floating;
    CBool = "MPI_C_BOOL", 1, 1, Logical;
    WChar = "MPI_WCHAR", 4, 4, Character;
    FloatComplex = "MPI_C_FLOAT_COMPLEX", 8, 4, Complex;
    DoubleComplex = "MPI_C_DOUBLE_COMPLEX", 16, 8, Complex;
    LongDoubleComplex = "MPI_C_LONG_DOUBLE_COMPLEX", 32, 16, Complex;
    Byte = "MPI_BYTE", 1, 1, Byte;
    Packed = "MPI_PACKED", 1, 1, Packed;
    Aint = "MPI_AINT", 8, 8, Integer;
    Offset = "MPI_OFFSET", 8, 8, Integer;
    Count = "MPI_COUNT", 8, 8, Integer;
    // Fortran types with the usual gfortran sizes (default INTEGER/REAL/LOGICAL of 4 bytes).
    FInteger = "MPI_INTEGER", 4, 4, Integer;
    FInteger1 = "MPI_INTEGER1", 1, 1, Integer;
    FInteger2 = "MPI_INTEGER2", 2, 2, Integer;
    FInteger4 = "MPI_INTEGER4", 4, 4, Integer;
    FInteger8 = "MPI_INTEGER8", 8, 8, Integer;
    FReal = "MPI_REAL", 4, 4, Floating;
    FDoublePrecision = "MPI_DOUBLE_PRECISION", 8, 8, Floating;
    FReal4 = "MPI_REAL4", 4, 4, Floating;
    FReal8 = "MPI_REAL8", 8, 8, Floating;
    FLogical = "MPI_LOGICAL", 4, 4, Logical;
    FComplex = "MPI_COMPLEX", 8, 4, Complex;
    FDoubleComplex = "MPI_DOUBLE_COMPLEX", 16, 8, Complex;
    FComplex8 = "MPI_COMPLEX8", 8, 4, Complex;
    FComplex16 = "MPI_COMPLEX16", 16, 8, Complex;
    FCharacter = "MPI_CHARACTER", 1, 1, Character;
}

/// The unit a reduction works on: one basic value, or a (value, index) pair
/// for MINLOC/MAXLOC.
///
/// In memory (the user's buffer) a pair has C struct layout with padding
/// (`extent()`); in the packed stream, which is what `op::reduce` works on,
/// it is the value followed directly by the index (`size()` bytes).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Elem {
    Basic(Basic),
    /// (value type, index type)
    Pair(Basic, Basic),
}

impl Elem {
    pub const FLOAT_INT: Elem = Elem::Pair(Basic::Float, Basic::Int);
    pub const DOUBLE_INT: Elem = Elem::Pair(Basic::Double, Basic::Int);
    pub const LONG_INT: Elem = Elem::Pair(Basic::Long, Basic::Int);
    pub const TWO_INT: Elem = Elem::Pair(Basic::Int, Basic::Int);
    pub const SHORT_INT: Elem = Elem::Pair(Basic::Short, Basic::Int);
    pub const LONG_DOUBLE_INT: Elem = Elem::Pair(Basic::LongDouble, Basic::Int);
    pub const TWO_INTEGER: Elem = Elem::Pair(Basic::FInteger, Basic::FInteger);
    pub const TWO_REAL: Elem = Elem::Pair(Basic::FReal, Basic::FReal);
    pub const TWO_DOUBLE_PRECISION: Elem = Elem::Pair(Basic::FDoublePrecision, Basic::FDoublePrecision);

    /// The predefined pair types.
    pub const PAIRS: &'static [Elem] = &[
        Elem::FLOAT_INT,
        Elem::DOUBLE_INT,
        Elem::LONG_INT,
        Elem::TWO_INT,
        Elem::SHORT_INT,
        Elem::LONG_DOUBLE_INT,
        Elem::TWO_INTEGER,
        Elem::TWO_REAL,
        Elem::TWO_DOUBLE_PRECISION,
    ];

    /// Bytes of data (packed size): value + index, no padding.
    pub const fn size(self) -> usize {
        match self {
            Elem::Basic(b) => b.size(),
            Elem::Pair(v, i) => v.size() + i.size(),
        }
    }
    /// Alignment of the C struct.
    pub const fn align(self) -> usize {
        match self {
            Elem::Basic(b) => b.align(),
            Elem::Pair(v, i) => {
                if v.align() > i.align() {
                    v.align()
                } else {
                    i.align()
                }
            }
        }
    }
    /// Offset of the index inside the C struct `{ value; index; }`.
    pub const fn index_offset(self) -> usize {
        match self {
            Elem::Basic(b) => b.size(),
            Elem::Pair(v, i) => round_up(v.size(), i.align()),
        }
    }
    /// Extent of the C struct (with trailing padding), e.g. 16 for MPI_DOUBLE_INT.
    pub const fn extent(self) -> usize {
        match self {
            Elem::Basic(b) => b.size(),
            Elem::Pair(_, i) => round_up(self.index_offset() + i.size(), self.align()),
        }
    }
    /// The predefined type of an MPI name, aliases included ("MPI_LONG_LONG_INT",
    /// "MPI_C_COMPLEX", "MPI_CXX_BOOL", ...), so the ABI layer can build its
    /// handle table from the generated constants by name. None for names
    /// gpumpi does not support.
    pub fn from_name(name: &str) -> Option<Elem> {
        if let Some(b) = Basic::ALL.iter().find(|b| b.name() == name) {
            return Some(Elem::Basic(*b));
        }
        if let Some(p) = Elem::PAIRS.iter().find(|p| p.name() == name) {
            return Some(*p);
        }
        let b = match name {
            "MPI_LONG_LONG_INT" => Basic::LongLong,
            "MPI_C_COMPLEX" | "MPI_CXX_FLOAT_COMPLEX" => Basic::FloatComplex,
            "MPI_CXX_DOUBLE_COMPLEX" => Basic::DoubleComplex,
            "MPI_CXX_LONG_DOUBLE_COMPLEX" => Basic::LongDoubleComplex,
            "MPI_CXX_BOOL" => Basic::CBool,
            _ => return None,
        };
        Some(Elem::Basic(b))
    }

    pub const fn name(self) -> &'static str {
        match self {
            Elem::Basic(b) => b.name(),
            Elem::Pair(Basic::Float, Basic::Int) => "MPI_FLOAT_INT",
            Elem::Pair(Basic::Double, Basic::Int) => "MPI_DOUBLE_INT",
            Elem::Pair(Basic::Long, Basic::Int) => "MPI_LONG_INT",
            Elem::Pair(Basic::Int, Basic::Int) => "MPI_2INT",
            Elem::Pair(Basic::Short, Basic::Int) => "MPI_SHORT_INT",
            Elem::Pair(Basic::LongDouble, Basic::Int) => "MPI_LONG_DOUBLE_INT",
            Elem::Pair(Basic::FInteger, Basic::FInteger) => "MPI_2INTEGER",
            Elem::Pair(Basic::FReal, Basic::FReal) => "MPI_2REAL",
            Elem::Pair(Basic::FDoublePrecision, Basic::FDoublePrecision) => "MPI_2DOUBLE_PRECISION",
            Elem::Pair(..) => "(pair type)",
        }
    }
}

const fn round_up(x: usize, a: usize) -> usize {
    x.div_ceil(a) * a
}

/// One run of `count` consecutive values of `basic` at byte displacement `disp`
/// (relative to the buffer address of the element).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Block {
    pub disp: isize,
    pub basic: Basic,
    pub count: usize,
}

impl Block {
    pub fn bytes(&self) -> usize {
        self.count * self.basic.size()
    }
}

/// Array storage order of `subarray`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Order {
    C,
    Fortran,
}

/// How a type was made, with the constructor's arguments as given
/// (for `MPI_Type_get_envelope` / `MPI_Type_get_contents`).
#[derive(Clone, Debug)]
pub enum Combiner {
    /// A predefined type (basic or pair).
    Named(Elem),
    Dup(Arc<TypeDesc>),
    Contiguous {
        count: i64,
        old: Arc<TypeDesc>,
    },
    Vector {
        count: i64,
        blocklen: i64,
        stride: i64,
        old: Arc<TypeDesc>,
    },
    /// `stride` in bytes.
    Hvector {
        count: i64,
        blocklen: i64,
        stride: isize,
        old: Arc<TypeDesc>,
    },
    Indexed {
        blocklens: Vec<i64>,
        disps: Vec<i64>,
        old: Arc<TypeDesc>,
    },
    Hindexed {
        blocklens: Vec<i64>,
        disps: Vec<isize>,
        old: Arc<TypeDesc>,
    },
    IndexedBlock {
        blocklen: i64,
        disps: Vec<i64>,
        old: Arc<TypeDesc>,
    },
    HindexedBlock {
        blocklen: i64,
        disps: Vec<isize>,
        old: Arc<TypeDesc>,
    },
    Struct {
        blocklens: Vec<i64>,
        disps: Vec<isize>,
        types: Vec<Arc<TypeDesc>>,
    },
    Subarray {
        sizes: Vec<i64>,
        subsizes: Vec<i64>,
        starts: Vec<i64>,
        order: Order,
        old: Arc<TypeDesc>,
    },
    Darray {
        size: i64,
        rank: i64,
        gsizes: Vec<i64>,
        distribs: Vec<Distrib>,
        /// `None` = `MPI_DISTRIBUTE_DFLT_DARG`.
        dargs: Vec<Option<i64>>,
        psizes: Vec<i64>,
        order: Order,
        old: Arc<TypeDesc>,
    },
    Resized {
        lb: isize,
        extent: isize,
        old: Arc<TypeDesc>,
    },
}

/// Distribution of one dimension of `darray`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Distrib {
    Block,
    Cyclic,
    None,
}

/// The combiner kind, for `MPI_Type_get_envelope` (the ABI layer maps it to
/// the `MPI_COMBINER_*` value).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CombinerKind {
    Named,
    Dup,
    Contiguous,
    Vector,
    Hvector,
    Indexed,
    Hindexed,
    IndexedBlock,
    HindexedBlock,
    Struct,
    Subarray,
    Darray,
    Resized,
}

/// Arguments of a constructor in the layout of `MPI_Type_get_contents`:
/// integers, addresses, large counts, datatypes. A type marked with
/// `with_large_counts` (made by an `_c` constructor) has its counts and
/// displacements in `large` as the standard's large-count table says.
///
/// Enumerated values are encoded here and must be mapped to the ABI's
/// constants by the ABI layer: order 0 = C, 1 = Fortran; distribution
/// 0 = BLOCK, 1 = CYCLIC, 2 = NONE; darg -1 = `MPI_DISTRIBUTE_DFLT_DARG`.
#[derive(Clone, Debug, Default)]
pub struct Contents {
    pub ints: Vec<i64>,
    pub addrs: Vec<isize>,
    pub large: Vec<i64>,
    pub types: Vec<Arc<TypeDesc>>,
}

/// A datatype: flattened type map plus bounds and the combiner.
#[derive(Clone, Debug)]
pub struct TypeDesc {
    /// Shared, so `dup` and `resized` do not copy large maps.
    blocks: Arc<[Block]>,
    /// Packed offset of each block inside one element (same length as `blocks`).
    offs: Arc<[usize]>,
    /// (displacement, bytes) of each block: what packing walks.
    runs: Arc<[(isize, usize)]>,
    /// The byte length shared by all runs, or 0.
    uniform: usize,
    lb: isize,
    ub: isize,
    true_lb: isize,
    true_ub: isize,
    size: usize,
    align: usize,
    lb_marker: bool,
    ub_marker: bool,
    elem: Option<Elem>,
    combiner: Combiner,
    /// Made by a large-count (`_c`) constructor: changes `contents()`.
    large: bool,
}

/// Most separate pieces a flattened type map may hold (24 bytes each).
pub const MAX_BLOCKS: usize = 1 << 26;

fn check_count(what: &str, n: i64) -> MpiResult<usize> {
    if n < 0 {
        mpi_bail!(MPI_ERR_COUNT, "{} {} is negative", what, n);
    }
    match usize::try_from(n) {
        Ok(v) => Ok(v),
        Err(_) => mpi_bail!(MPI_ERR_COUNT, "{} {} is too large", what, n),
    }
}

fn check_blocklen(n: i64) -> MpiResult<usize> {
    if n < 0 {
        mpi_bail!(MPI_ERR_ARG, "block length {} is negative", n);
    }
    Ok(n as usize)
}

fn mul_disp(a: i64, b: isize) -> MpiResult<isize> {
    match isize::try_from(a).ok().and_then(|a| a.checked_mul(b)) {
        Some(v) => Ok(v),
        None => mpi_bail!(MPI_ERR_ARG, "displacement {} * {} overflows", a, b),
    }
}

/// Accumulates the type map and bounds of a derived type.
struct Builder {
    blocks: Vec<Block>,
    size: usize,
    align: usize,
    // (marked min, unmarked min) for lb, (marked max, unmarked max) for ub
    lb_m: Option<isize>,
    lb_u: Option<isize>,
    ub_m: Option<isize>,
    ub_u: Option<isize>,
    true_lb: Option<isize>,
    true_ub: Option<isize>,
    /// Common elem of the children with data. None = no child yet; Some(None) = children disagree.
    elem: Option<Option<Elem>>,
    /// The same over children without data (used when no child has data, so
    /// that `contiguous(0, MPI_INT)` still reports MPI_INT).
    empty_elem: Option<Option<Elem>>,
}

fn merge_elem(acc: Option<Option<Elem>>, e: Option<Elem>) -> Option<Option<Elem>> {
    Some(match acc {
        None => e,
        Some(a) if a == e => a,
        Some(_) => None,
    })
}

fn min_opt(a: Option<isize>, b: isize) -> Option<isize> {
    Some(a.map_or(b, |a| a.min(b)))
}
fn max_opt(a: Option<isize>, b: isize) -> Option<isize> {
    Some(a.map_or(b, |a| a.max(b)))
}

impl Builder {
    fn new() -> Self {
        Builder {
            blocks: Vec::new(),
            size: 0,
            align: 1,
            lb_m: None,
            lb_u: None,
            ub_m: None,
            ub_u: None,
            true_lb: None,
            true_ub: None,
            elem: None,
            empty_elem: None,
        }
    }

    fn push_block(&mut self, b: Block) {
        if b.count == 0 {
            return;
        }
        if let Some(last) = self.blocks.last_mut() {
            if last.basic == b.basic && last.disp + last.bytes() as isize == b.disp {
                last.count += b.count;
                return;
            }
        }
        self.blocks.push(b);
    }

    /// `reps` copies of `child`, the k-th at byte displacement `disp + k * child.extent()`.
    fn push(&mut self, disp: isize, reps: usize, child: &TypeDesc) -> MpiResult<()> {
        if reps == 0 || child.size == 0 {
            self.empty_elem = merge_elem(self.empty_elem, child.elem);
        }
        if reps == 0 {
            return Ok(());
        }
        let ext = child.extent();
        let last = match isize::try_from(reps - 1).ok().and_then(|r| r.checked_mul(ext)) {
            Some(v) => disp.checked_add(v),
            None => None,
        };
        let Some(last) = last else {
            mpi_bail!(MPI_ERR_ARG, "type map displacement overflows");
        };
        let has_data = !child.blocks.is_empty();
        if !has_data && !child.lb_marker && !child.ub_marker {
            return Ok(());
        }
        let (lo, hi) = (disp.min(last), disp.max(last));
        if child.lb_marker {
            self.lb_m = min_opt(self.lb_m, lo + child.lb);
        } else {
            self.lb_u = min_opt(self.lb_u, lo + child.lb);
        }
        if child.ub_marker {
            self.ub_m = max_opt(self.ub_m, hi + child.ub);
        } else {
            self.ub_u = max_opt(self.ub_u, hi + child.ub);
        }
        if has_data {
            self.true_lb = min_opt(self.true_lb, lo + child.true_lb);
            self.true_ub = max_opt(self.true_ub, hi + child.true_ub);
        }
        self.align = self.align.max(child.align);
        let Some(size) = reps.checked_mul(child.size).and_then(|s| s.checked_add(self.size)) else {
            mpi_bail!(MPI_ERR_ARG, "type size overflows");
        };
        self.size = size;
        if has_data {
            self.elem = merge_elem(self.elem, child.elem);
        }
        if child.is_dense() {
            // One run: `reps` copies side by side are a single longer block.
            let b = child.blocks[0];
            self.push_block(Block {
                disp: disp + b.disp,
                basic: b.basic,
                count: b.count * reps,
            });
            return Ok(());
        }
        let pieces = reps.saturating_mul(child.blocks.len());
        if pieces > MAX_BLOCKS || self.blocks.len() + pieces > MAX_BLOCKS {
            mpi_bail!(
                MPI_ERR_NO_MEM,
                "type map of more than {} separate pieces (gpumpi flattens type maps)",
                MAX_BLOCKS
            );
        }
        self.blocks.reserve(pieces.min(1 << 20));
        for k in 0..reps {
            let base = disp + k as isize * ext;
            for b in child.blocks.iter() {
                self.push_block(Block {
                    disp: base + b.disp,
                    ..*b
                });
            }
        }
        Ok(())
    }

    fn finish(self, combiner: Combiner, pad_struct: bool) -> TypeDesc {
        let lb_marker = self.lb_m.is_some();
        let ub_marker = self.ub_m.is_some();
        let lb = self.lb_m.or(self.lb_u).unwrap_or(0);
        let mut ub = self.ub_m.or(self.ub_u).unwrap_or(0);
        if pad_struct && !lb_marker && !ub_marker {
            let ext = ub - lb;
            let a = self.align as isize;
            if ext.rem_euclid(a) != 0 {
                ub += a - ext.rem_euclid(a);
            }
        }
        // Elem: the children's common elem, or the one basic type of all blocks.
        let mut elem = match self.elem {
            Some(e) => e,
            None => self.empty_elem.flatten(),
        };
        if elem.is_none() {
            if let Some(first) = self.blocks.first() {
                if self.blocks.iter().all(|b| b.basic == first.basic) {
                    elem = Some(Elem::Basic(first.basic));
                }
            }
        }
        TypeDesc::from_parts(
            self.blocks,
            lb,
            ub,
            self.true_lb.unwrap_or(0),
            self.true_ub.unwrap_or(0),
            self.align,
            lb_marker,
            ub_marker,
            elem,
            combiner,
        )
    }
}

impl TypeDesc {
    #[allow(clippy::too_many_arguments)]
    fn from_parts(
        blocks: Vec<Block>,
        lb: isize,
        ub: isize,
        true_lb: isize,
        true_ub: isize,
        align: usize,
        lb_marker: bool,
        ub_marker: bool,
        elem: Option<Elem>,
        combiner: Combiner,
    ) -> TypeDesc {
        let mut offs = Vec::with_capacity(blocks.len());
        let mut size = 0usize;
        for b in &blocks {
            offs.push(size);
            size += b.bytes();
        }
        let runs: Vec<(isize, usize)> = blocks.iter().map(|b| (b.disp, b.bytes())).collect();
        let uniform = match runs.first() {
            Some(&(_, n)) if runs.iter().all(|r| r.1 == n) => n,
            _ => 0,
        };
        TypeDesc {
            blocks: blocks.into(),
            offs: offs.into(),
            runs: runs.into(),
            uniform,
            lb,
            ub,
            true_lb,
            true_ub,
            size,
            align,
            lb_marker,
            ub_marker,
            elem,
            combiner,
            large: false,
        }
    }

    // ---------------------------------------------------------------- constructors

    /// A predefined basic type.
    pub fn predefined(b: Basic) -> TypeDesc {
        let sz = b.size() as isize;
        TypeDesc::from_parts(
            vec![Block {
                disp: 0,
                basic: b,
                count: 1,
            }],
            0,
            sz,
            0,
            sz,
            b.align(),
            false,
            false,
            Some(Elem::Basic(b)),
            Combiner::Named(Elem::Basic(b)),
        )
    }

    /// A predefined type (basic or pair); the same as `pair`.
    pub fn named(e: Elem) -> TypeDesc {
        Self::pair(e)
    }

    /// A predefined type given as an `Elem`: a basic type or a pair type
    /// (MPI_DOUBLE_INT, ...) with its C struct layout.
    pub fn pair(e: Elem) -> TypeDesc {
        match e {
            Elem::Basic(b) => TypeDesc::predefined(b),
            Elem::Pair(v, i) => {
                let ioff = e.index_offset() as isize;
                let mut blocks = vec![Block {
                    disp: 0,
                    basic: v,
                    count: 1,
                }];
                if v == i && ioff == v.size() as isize {
                    blocks[0].count = 2;
                } else {
                    blocks.push(Block {
                        disp: ioff,
                        basic: i,
                        count: 1,
                    });
                }
                TypeDesc::from_parts(
                    blocks,
                    0,
                    e.extent() as isize,
                    0,
                    ioff + i.size() as isize,
                    e.align(),
                    false,
                    false,
                    Some(e),
                    Combiner::Named(e),
                )
            }
        }
    }

    pub fn contiguous(count: i64, old: &Arc<TypeDesc>) -> MpiResult<TypeDesc> {
        let n = check_count("count", count)?;
        let mut b = Builder::new();
        b.push(0, n, old)?;
        Ok(b.finish(
            Combiner::Contiguous {
                count,
                old: old.clone(),
            },
            false,
        ))
    }

    /// `stride` in multiples of `old`'s extent.
    pub fn vector(count: i64, blocklen: i64, stride: i64, old: &Arc<TypeDesc>) -> MpiResult<TypeDesc> {
        let stride_bytes = mul_disp(stride, old.extent())?;
        let mut t = Self::hvector_inner(count, blocklen, stride_bytes, old)?;
        t.combiner = Combiner::Vector {
            count,
            blocklen,
            stride,
            old: old.clone(),
        };
        Ok(t)
    }

    /// `stride` in bytes.
    pub fn hvector(count: i64, blocklen: i64, stride: isize, old: &Arc<TypeDesc>) -> MpiResult<TypeDesc> {
        let mut t = Self::hvector_inner(count, blocklen, stride, old)?;
        t.combiner = Combiner::Hvector {
            count,
            blocklen,
            stride,
            old: old.clone(),
        };
        Ok(t)
    }

    fn hvector_inner(count: i64, blocklen: i64, stride: isize, old: &Arc<TypeDesc>) -> MpiResult<TypeDesc> {
        let n = check_count("count", count)?;
        let bl = check_blocklen(blocklen)?;
        let mut b = Builder::new();
        if old.is_dense() && Some(stride) == isize::try_from(bl).ok().and_then(|bl| bl.checked_mul(old.extent())) {
            // Blocks side by side: one run (no per-block loop for huge counts).
            let Some(total) = n.checked_mul(bl) else {
                mpi_bail!(MPI_ERR_COUNT, "count {} * block length {} overflows", n, bl);
            };
            b.push(0, total, old)?;
        } else if bl > 0 && (old.size() > 0 || old.lb_marker || old.ub_marker) {
            let per = if old.is_dense() {
                1
            } else {
                bl.saturating_mul(old.blocks.len())
            };
            if n.saturating_mul(per) > MAX_BLOCKS {
                mpi_bail!(
                    MPI_ERR_NO_MEM,
                    "type map of more than {} separate pieces (gpumpi flattens type maps)",
                    MAX_BLOCKS
                );
            }
            for i in 0..n {
                b.push(mul_disp(i as i64, stride)?, bl, old)?;
            }
        }
        Ok(b.finish(Combiner::Dup(old.clone()), false))
    }

    /// Displacements in multiples of `old`'s extent.
    pub fn indexed(blocklens: &[i64], disps: &[i64], old: &Arc<TypeDesc>) -> MpiResult<TypeDesc> {
        let bytes: Vec<isize> = disps
            .iter()
            .map(|&d| mul_disp(d, old.extent()))
            .collect::<MpiResult<_>>()?;
        let mut t = Self::hindexed_inner(blocklens, &bytes, old)?;
        t.combiner = Combiner::Indexed {
            blocklens: blocklens.to_vec(),
            disps: disps.to_vec(),
            old: old.clone(),
        };
        Ok(t)
    }

    /// Displacements in bytes.
    pub fn hindexed(blocklens: &[i64], disps: &[isize], old: &Arc<TypeDesc>) -> MpiResult<TypeDesc> {
        let mut t = Self::hindexed_inner(blocklens, disps, old)?;
        t.combiner = Combiner::Hindexed {
            blocklens: blocklens.to_vec(),
            disps: disps.to_vec(),
            old: old.clone(),
        };
        Ok(t)
    }

    fn hindexed_inner(blocklens: &[i64], disps: &[isize], old: &Arc<TypeDesc>) -> MpiResult<TypeDesc> {
        if blocklens.len() != disps.len() {
            mpi_bail!(
                MPI_ERR_ARG,
                "{} block lengths but {} displacements",
                blocklens.len(),
                disps.len()
            );
        }
        let mut b = Builder::new();
        for (&bl, &d) in blocklens.iter().zip(disps) {
            b.push(d, check_blocklen(bl)?, old)?;
        }
        Ok(b.finish(Combiner::Dup(old.clone()), false))
    }

    /// Displacements in multiples of `old`'s extent.
    pub fn indexed_block(blocklen: i64, disps: &[i64], old: &Arc<TypeDesc>) -> MpiResult<TypeDesc> {
        check_blocklen(blocklen)?;
        let bytes: Vec<isize> = disps
            .iter()
            .map(|&d| mul_disp(d, old.extent()))
            .collect::<MpiResult<_>>()?;
        let bls = vec![blocklen; disps.len()];
        let mut t = Self::hindexed_inner(&bls, &bytes, old)?;
        t.combiner = Combiner::IndexedBlock {
            blocklen,
            disps: disps.to_vec(),
            old: old.clone(),
        };
        Ok(t)
    }

    /// Displacements in bytes.
    pub fn hindexed_block(blocklen: i64, disps: &[isize], old: &Arc<TypeDesc>) -> MpiResult<TypeDesc> {
        check_blocklen(blocklen)?;
        let bls = vec![blocklen; disps.len()];
        let mut t = Self::hindexed_inner(&bls, disps, old)?;
        t.combiner = Combiner::HindexedBlock {
            blocklen,
            disps: disps.to_vec(),
            old: old.clone(),
        };
        Ok(t)
    }

    /// Displacements in bytes. Without explicit bounds (no `resized` child)
    /// the extent is rounded up to the largest alignment of the members.
    pub fn create_struct(blocklens: &[i64], disps: &[isize], types: &[&Arc<TypeDesc>]) -> MpiResult<TypeDesc> {
        if blocklens.len() != disps.len() || blocklens.len() != types.len() {
            mpi_bail!(
                MPI_ERR_ARG,
                "{} block lengths, {} displacements and {} types",
                blocklens.len(),
                disps.len(),
                types.len()
            );
        }
        let mut b = Builder::new();
        for ((&bl, &d), t) in blocklens.iter().zip(disps).zip(types) {
            b.push(d, check_blocklen(bl)?, t)?;
        }
        let comb = Combiner::Struct {
            blocklens: blocklens.to_vec(),
            disps: disps.to_vec(),
            types: types.iter().map(|t| (*t).clone()).collect(),
        };
        Ok(b.finish(comb, true))
    }

    /// New bounds: lb and extent become explicit markers.
    pub fn resized(old: &Arc<TypeDesc>, lb: isize, extent: isize) -> MpiResult<TypeDesc> {
        let Some(ub) = lb.checked_add(extent) else {
            mpi_bail!(MPI_ERR_ARG, "lb {} + extent {} overflows", lb, extent);
        };
        let mut t = (**old).clone();
        t.lb = lb;
        t.ub = ub;
        t.lb_marker = true;
        t.ub_marker = true;
        t.combiner = Combiner::Resized {
            lb,
            extent,
            old: old.clone(),
        };
        Ok(t)
    }

    pub fn dup(old: &Arc<TypeDesc>) -> TypeDesc {
        let mut t = (**old).clone();
        t.combiner = Combiner::Dup(old.clone());
        t
    }

    /// An `ndims`-dimensional subarray of an array of `sizes` elements of `old`,
    /// `subsizes` elements starting at `starts`. The result has lb 0 and the
    /// extent of the whole array.
    pub fn subarray(
        sizes: &[i64],
        subsizes: &[i64],
        starts: &[i64],
        order: Order,
        old: &Arc<TypeDesc>,
    ) -> MpiResult<TypeDesc> {
        let nd = sizes.len();
        if nd == 0 {
            mpi_bail!(MPI_ERR_ARG, "subarray needs at least one dimension");
        }
        if subsizes.len() != nd || starts.len() != nd {
            mpi_bail!(MPI_ERR_ARG, "subarray: sizes, subsizes and starts differ in length");
        }
        for d in 0..nd {
            if sizes[d] < 1 {
                mpi_bail!(
                    MPI_ERR_ARG,
                    "subarray: size {} of dimension {} is not positive",
                    sizes[d],
                    d
                );
            }
            if subsizes[d] < 0 || subsizes[d] > sizes[d] {
                mpi_bail!(
                    MPI_ERR_ARG,
                    "subarray: subsize {} of dimension {} is not in 0..={}",
                    subsizes[d],
                    d,
                    sizes[d]
                );
            }
            if starts[d] < 0 || starts[d] > sizes[d] - subsizes[d] {
                mpi_bail!(
                    MPI_ERR_ARG,
                    "subarray: start {} of dimension {} is out of range",
                    starts[d],
                    d
                );
            }
        }
        // Dimensions from fastest to slowest varying.
        let dims: Vec<usize> = match order {
            Order::C => (0..nd).rev().collect(),
            Order::Fortran => (0..nd).collect(),
        };
        let ext = old.extent();
        let mut t: Arc<TypeDesc> = Arc::new(Self::contiguous(subsizes[dims[0]], old)?);
        let mut stride = mul_disp(sizes[dims[0]], ext)?;
        let mut disp = mul_disp(starts[dims[0]], ext)?;
        for &d in &dims[1..] {
            t = Arc::new(Self::hvector(subsizes[d], 1, stride, &t)?);
            disp += mul_disp(starts[d], stride)?;
            stride = mul_disp(sizes[d], stride)?;
        }
        let t = Arc::new(Self::hindexed(&[1], &[disp], &t)?);
        let mut t = Self::resized(&t, 0, stride)?;
        t.combiner = Combiner::Subarray {
            sizes: sizes.to_vec(),
            subsizes: subsizes.to_vec(),
            starts: starts.to_vec(),
            order,
            old: old.clone(),
        };
        Ok(t)
    }

    /// `MPI_Type_create_darray`: the part of a `gsizes` global array (of
    /// `old`) that process `rank` of a `psizes` process grid (row-major) owns
    /// under the given distributions. `dargs[i]` None is
    /// `MPI_DISTRIBUTE_DFLT_DARG`. The result has lb 0 and the extent of the
    /// whole array. A dimension with `Distrib::None` is not split (its psize
    /// is ignored, as MPICH does).
    #[allow(clippy::too_many_arguments)]
    pub fn darray(
        size: i64,
        rank: i64,
        gsizes: &[i64],
        distribs: &[Distrib],
        dargs: &[Option<i64>],
        psizes: &[i64],
        order: Order,
        old: &Arc<TypeDesc>,
    ) -> MpiResult<TypeDesc> {
        let nd = gsizes.len();
        if nd == 0 || distribs.len() != nd || dargs.len() != nd || psizes.len() != nd {
            mpi_bail!(MPI_ERR_ARG, "darray: ndims {} and argument array lengths disagree", nd);
        }
        if gsizes.iter().chain(psizes).any(|&g| g < 1) {
            mpi_bail!(
                MPI_ERR_ARG,
                "darray: global sizes and process grid sizes must be positive"
            );
        }
        if psizes.iter().try_fold(1i64, |a, &p| a.checked_mul(p)) != Some(size) {
            mpi_bail!(
                MPI_ERR_ARG,
                "darray: process grid {:?} does not have {} processes",
                psizes,
                size
            );
        }
        if rank < 0 || rank >= size {
            mpi_bail!(MPI_ERR_RANK, "darray: rank {} is not in 0..{}", rank, size);
        }
        // Process grid coordinates, row-major.
        let mut coords = vec![0i64; nd];
        let (mut left, mut r) = (size, rank);
        for d in 0..nd {
            left /= psizes[d];
            coords[d] = r / left;
            r %= left;
        }
        // Local runs (start, len) of global indices of each dimension.
        let mut runs: Vec<Vec<(i64, i64)>> = Vec::with_capacity(nd);
        for d in 0..nd {
            let (g, p, c) = (gsizes[d], psizes[d], coords[d]);
            let mut v = Vec::new();
            match distribs[d] {
                Distrib::None => v.push((0, g)),
                Distrib::Block => {
                    let b = match dargs[d] {
                        None => (g + p - 1) / p,
                        Some(b) if b > 0 && b.saturating_mul(p) >= g => b,
                        Some(b) => mpi_bail!(
                            MPI_ERR_ARG,
                            "darray: block size {} of dimension {} does not cover {} elements on {} processes",
                            b,
                            d,
                            g,
                            p
                        ),
                    };
                    let start = c.saturating_mul(b);
                    if start < g {
                        v.push((start, b.min(g - start)));
                    }
                }
                Distrib::Cyclic => {
                    let b = match dargs[d] {
                        None => 1,
                        Some(b) if b > 0 => b,
                        Some(b) => mpi_bail!(MPI_ERR_ARG, "darray: cyclic block size {} is not positive", b),
                    };
                    if g / p.saturating_mul(b) > MAX_BLOCKS as i64 {
                        mpi_bail!(MPI_ERR_NO_MEM, "darray: too many cyclic blocks in dimension {}", d);
                    }
                    let mut k = c.saturating_mul(b);
                    while k < g {
                        v.push((k, b.min(g - k)));
                        k = k.saturating_add(p.saturating_mul(b));
                    }
                }
            }
            runs.push(v);
        }
        // Build from the fastest varying dimension outwards; after each
        // dimension the type is resized to span that whole sub-array, so the
        // next dimension steps by it.
        let dims: Vec<usize> = match order {
            Order::C => (0..nd).rev().collect(),
            Order::Fortran => (0..nd).collect(),
        };
        let mut t: Arc<TypeDesc> = old.clone();
        for &d in &dims {
            let ext = t.extent();
            let bls: Vec<i64> = runs[d].iter().map(|r| r.1).collect();
            let disps: Vec<isize> = runs[d].iter().map(|r| mul_disp(r.0, ext)).collect::<MpiResult<_>>()?;
            let h = Arc::new(Self::hindexed(&bls, &disps, &t)?);
            t = Arc::new(Self::resized(&h, 0, mul_disp(gsizes[d], ext)?)?);
        }
        let mut t = (*t).clone();
        t.combiner = Combiner::Darray {
            size,
            rank,
            gsizes: gsizes.to_vec(),
            distribs: distribs.to_vec(),
            dargs: dargs.to_vec(),
            psizes: psizes.to_vec(),
            order,
            old: old.clone(),
        };
        Ok(t)
    }

    // ---------------------------------------------------------------- queries

    /// One block whose copies at multiples of the extent touch: `n` elements
    /// are one run of `n * size` bytes.
    fn is_dense(&self) -> bool {
        self.blocks.len() == 1 && self.extent() == self.size as isize
    }

    pub fn blocks(&self) -> &[Block] {
        &self.blocks
    }
    pub fn lb(&self) -> isize {
        self.lb
    }
    pub fn ub(&self) -> isize {
        self.ub
    }
    pub fn extent(&self) -> isize {
        self.ub - self.lb
    }
    pub fn true_lb(&self) -> isize {
        self.true_lb
    }
    pub fn true_ub(&self) -> isize {
        self.true_ub
    }
    pub fn true_extent(&self) -> isize {
        self.true_ub - self.true_lb
    }
    /// Bytes of data in one element (`MPI_Type_size`).
    pub fn size(&self) -> usize {
        self.size
    }
    /// Largest alignment of the basic types in the map.
    pub fn align(&self) -> usize {
        self.align
    }
    pub fn combiner(&self) -> &Combiner {
        &self.combiner
    }
    /// True for predefined types (basic and pair).
    pub fn is_predefined(&self) -> bool {
        matches!(self.combiner, Combiner::Named(_))
    }
    /// The single `Elem` the type is made of, for reductions: Some when every
    /// block has the same basic type, or the type is (made of) one pair type.
    pub fn elem(&self) -> Option<Elem> {
        self.elem
    }

    /// Bytes of the packed stream of `count` elements.
    pub fn packed_size(&self, count: usize) -> usize {
        self.size.saturating_mul(count)
    }

    /// `MPI_Get_count`: whole elements in `bytes` of packed data, None
    /// (MPI_UNDEFINED) when `bytes` is not a whole number of elements.
    pub fn count_of(&self, bytes: usize) -> Option<usize> {
        if self.size == 0 {
            return if bytes == 0 { Some(0) } else { None };
        }
        bytes.is_multiple_of(self.size).then_some(bytes / self.size)
    }

    /// `MPI_Get_elements`: basic elements in the first `bytes` bytes of the
    /// packed stream, None (MPI_UNDEFINED) when `bytes` ends inside a basic
    /// element. A pair type counts as two basic elements (value and index).
    pub fn elements_of(&self, bytes: usize) -> Option<usize> {
        if self.size == 0 {
            return if bytes == 0 { Some(0) } else { None };
        }
        let per: usize = self.blocks.iter().map(|b| b.count).sum();
        let mut n = (bytes / self.size) * per;
        let mut rem = bytes % self.size;
        for b in self.blocks.iter() {
            if rem == 0 {
                break;
            }
            let take = rem.min(b.bytes());
            if take % b.basic.size() != 0 {
                return None;
            }
            n += take / b.basic.size();
            rem -= take;
        }
        Some(n)
    }

    /// True when the data of `count` elements is one contiguous run of
    /// `packed_size(count)` bytes starting at `buf + true_lb()`, in packed
    /// order: then no packing is needed.
    pub fn is_contiguous(&self, count: usize) -> bool {
        if count == 0 || self.size == 0 {
            return true;
        }
        self.blocks.len() == 1
            && self.blocks[0].disp == self.true_lb
            && (count == 1 || self.extent() == self.size as isize)
    }

    pub fn kind(&self) -> CombinerKind {
        match self.combiner {
            Combiner::Named(_) => CombinerKind::Named,
            Combiner::Dup(_) => CombinerKind::Dup,
            Combiner::Contiguous { .. } => CombinerKind::Contiguous,
            Combiner::Vector { .. } => CombinerKind::Vector,
            Combiner::Hvector { .. } => CombinerKind::Hvector,
            Combiner::Indexed { .. } => CombinerKind::Indexed,
            Combiner::Hindexed { .. } => CombinerKind::Hindexed,
            Combiner::IndexedBlock { .. } => CombinerKind::IndexedBlock,
            Combiner::HindexedBlock { .. } => CombinerKind::HindexedBlock,
            Combiner::Struct { .. } => CombinerKind::Struct,
            Combiner::Subarray { .. } => CombinerKind::Subarray,
            Combiner::Darray { .. } => CombinerKind::Darray,
            Combiner::Resized { .. } => CombinerKind::Resized,
        }
    }

    /// Constructor arguments in `MPI_Type_get_contents` layout; `envelope()`
    /// is their lengths. Empty for predefined types.
    pub fn contents(&self) -> Contents {
        let mut c = Contents::default();
        match &self.combiner {
            Combiner::Named(_) => {}
            Combiner::Dup(old) => c.types.push(old.clone()),
            Combiner::Contiguous { count, old } => {
                c.ints.push(*count);
                c.types.push(old.clone());
            }
            Combiner::Vector {
                count,
                blocklen,
                stride,
                old,
            } => {
                c.ints.extend([*count, *blocklen, *stride]);
                c.types.push(old.clone());
            }
            Combiner::Hvector {
                count,
                blocklen,
                stride,
                old,
            } => {
                c.ints.extend([*count, *blocklen]);
                c.addrs.push(*stride);
                c.types.push(old.clone());
            }
            Combiner::Indexed { blocklens, disps, old } => {
                c.ints.push(blocklens.len() as i64);
                c.ints.extend(blocklens);
                c.ints.extend(disps);
                c.types.push(old.clone());
            }
            Combiner::Hindexed { blocklens, disps, old } => {
                c.ints.push(blocklens.len() as i64);
                c.ints.extend(blocklens);
                c.addrs.extend(disps);
                c.types.push(old.clone());
            }
            Combiner::IndexedBlock { blocklen, disps, old } => {
                c.ints.extend([disps.len() as i64, *blocklen]);
                c.ints.extend(disps);
                c.types.push(old.clone());
            }
            Combiner::HindexedBlock { blocklen, disps, old } => {
                c.ints.extend([disps.len() as i64, *blocklen]);
                c.addrs.extend(disps);
                c.types.push(old.clone());
            }
            Combiner::Struct {
                blocklens,
                disps,
                types,
            } => {
                c.ints.push(blocklens.len() as i64);
                c.ints.extend(blocklens);
                c.addrs.extend(disps);
                c.types.extend(types.iter().cloned());
            }
            Combiner::Subarray {
                sizes,
                subsizes,
                starts,
                order,
                old,
            } => {
                c.ints.push(sizes.len() as i64);
                c.ints.extend(sizes);
                c.ints.extend(subsizes);
                c.ints.extend(starts);
                c.ints.push(order_code(*order));
                c.types.push(old.clone());
            }
            Combiner::Darray {
                size,
                rank,
                gsizes,
                distribs,
                dargs,
                psizes,
                order,
                old,
            } => {
                c.ints.extend([*size, *rank, gsizes.len() as i64]);
                c.ints.extend(gsizes);
                c.ints.extend(distribs.iter().map(|d| match d {
                    Distrib::Block => 0,
                    Distrib::Cyclic => 1,
                    Distrib::None => 2,
                }));
                c.ints.extend(dargs.iter().map(|d| d.unwrap_or(-1)));
                c.ints.extend(psizes);
                c.ints.push(order_code(*order));
                c.types.push(old.clone());
            }
            Combiner::Resized { lb, extent, old } => {
                c.addrs.extend([*lb, *extent]);
                c.types.push(old.clone());
            }
        }
        if self.large {
            match &self.combiner {
                Combiner::Subarray { sizes, .. } => {
                    // ints [ndims, order], large [sizes, subsizes, starts]
                    let nd = sizes.len();
                    c.large = c.ints[1..1 + 3 * nd].to_vec();
                    c.ints = vec![nd as i64, c.ints[1 + 3 * nd]];
                }
                Combiner::Darray { gsizes, .. } => {
                    // ints without gsizes, large [gsizes]
                    let nd = gsizes.len();
                    c.large = c.ints.drain(3..3 + nd).collect();
                }
                _ => {
                    c.large = c.ints.drain(..).chain(c.addrs.drain(..).map(|a| a as i64)).collect();
                }
            }
        }
        c
    }

    /// Mark the type as made by a large-count (`_c`) constructor, which
    /// moves its counts and displacements to `Contents::large`.
    pub fn with_large_counts(mut self) -> TypeDesc {
        self.large = !matches!(self.combiner, Combiner::Named(_));
        self
    }

    /// (num_integers, num_addresses, num_large_counts, num_datatypes) of
    /// `MPI_Type_get_envelope_c` (`MPI_Type_get_envelope` has no large counts).
    pub fn envelope(&self) -> (usize, usize, usize, usize) {
        let c = self.contents();
        (c.ints.len(), c.addrs.len(), c.large.len(), c.types.len())
    }

    // ---------------------------------------------------------------- packing

    /// Pack `count` elements at `src` into `dst`; returns the bytes written
    /// (`min(dst.len(), packed_size(count))`: a short `dst` gets a prefix).
    ///
    /// # Safety
    /// `src` must point to a buffer holding `count` elements of this type
    /// (every byte the type map touches must be readable).
    pub unsafe fn pack(&self, count: usize, src: *const u8, dst: &mut [u8]) -> usize {
        // SAFETY: forwarded contract.
        unsafe { self.pack_range(count, src, 0, dst) }
    }

    /// Unpack the packed stream `src` into `count` elements at `dst`; returns
    /// the bytes consumed (`min(src.len(), packed_size(count))`).
    ///
    /// # Safety
    /// `dst` must point to a buffer holding `count` elements of this type
    /// (every byte the type map touches must be writable), not overlapping `src`.
    pub unsafe fn unpack(&self, count: usize, src: &[u8], dst: *mut u8) -> usize {
        // SAFETY: forwarded contract.
        unsafe { self.unpack_range(count, src, 0, dst) }
    }

    /// Pack bytes `[skip, skip + dst.len())` of the packed stream of `count`
    /// elements at `src` into `dst`; returns the bytes written (fewer when the
    /// stream ends first).
    ///
    /// # Safety
    /// As `pack`.
    pub unsafe fn pack_range(&self, count: usize, src: *const u8, skip: usize, dst: &mut [u8]) -> usize {
        let dp = dst.as_mut_ptr();
        let len = dst.len();
        // SAFETY: the caller guarantees the type map of `count` elements is
        // readable at `src`; `walk` stays inside `dst[..len]`.
        unsafe {
            self.walk(count, skip, len, |mem_off, pk_off, n| {
                copy_small(src.offset(mem_off), dp.add(pk_off), n)
            })
        }
    }

    /// Unpack `src`, which holds bytes `[skip, skip + src.len())` of the packed
    /// stream of `count` elements, into the elements at `dst`; returns the
    /// bytes consumed.
    ///
    /// # Safety
    /// As `unpack`.
    pub unsafe fn unpack_range(&self, count: usize, src: &[u8], skip: usize, dst: *mut u8) -> usize {
        let sp = src.as_ptr();
        let len = src.len();
        // SAFETY: the caller guarantees the type map of `count` elements is
        // writable at `dst`; `walk` stays inside `src[..len]`.
        unsafe {
            self.walk(count, skip, len, |mem_off, pk_off, n| {
                copy_small(sp.add(pk_off), dst.offset(mem_off), n)
            })
        }
    }

    /// Pieces of one element at memory offset `base`, from packed offset `r`
    /// inside the element, until the window of `len` bytes is full; `done`
    /// bytes of the window are already filled. Returns the new `done`.
    #[inline]
    fn walk_elem(
        &self,
        base: isize,
        r: usize,
        len: usize,
        mut done: usize,
        f: &mut impl FnMut(isize, usize, usize),
    ) -> usize {
        // Run holding packed offset r inside the element.
        let mut j = self.offs.partition_point(|&o| o <= r) - 1;
        let mut in_run = r - self.offs[j];
        while j < self.runs.len() && done < len {
            let (d, bytes) = self.runs[j];
            let n = (bytes - in_run).min(len - done);
            f(base + d + in_run as isize, done, n);
            done += n;
            in_run = 0;
            j += 1;
        }
        done
    }

    /// The pieces of memory holding packed-stream bytes `[skip, skip + len)`
    /// of `count` elements, in stream order, as `f(offset from the buffer
    /// address, offset inside the window, bytes)`; returns the bytes covered.
    /// For building iovecs (CMA `process_vm_readv`, scatter/gather copies)
    /// without packing. A contiguous layout gives one piece.
    pub fn for_each_piece(&self, count: usize, skip: usize, len: usize, f: impl FnMut(isize, usize, usize)) -> usize {
        self.walk(count, skip, len, f)
    }

    /// Calls `f(memory offset, offset in the caller's packed window, bytes)`
    /// for each piece of packed-stream bytes `[skip, skip + len)`, in order.
    /// Returns the number of bytes visited.
    #[inline]
    fn walk(&self, count: usize, skip: usize, len: usize, mut f: impl FnMut(isize, usize, usize)) -> usize {
        let total = self.packed_size(count);
        if skip >= total || len == 0 {
            return 0;
        }
        let len = len.min(total - skip);
        if self.is_contiguous(count) {
            f(self.true_lb + skip as isize, 0, len);
            return len;
        }
        let ext = self.extent();
        let mut i = skip / self.size;
        let r = skip % self.size;
        let mut done = 0usize;
        if r != 0 {
            // The rest of a partial first element.
            done = self.walk_elem(i as isize * ext, r, len, 0, &mut f);
            i += 1;
        }
        let whole = (len - done) / self.size;
        done = match self.uniform {
            4 => whole_elems::<4>(&self.runs, ext, i, whole, done, &mut f),
            8 => whole_elems::<8>(&self.runs, ext, i, whole, done, &mut f),
            16 => whole_elems::<16>(&self.runs, ext, i, whole, done, &mut f),
            _ => whole_elems::<0>(&self.runs, ext, i, whole, done, &mut f),
        };
        i += whole;
        if done < len {
            // The start of a partial last element.
            self.walk_elem(i as isize * ext, 0, len, done, &mut f);
        }
        len
    }
}

/// Whole elements `i0 .. i0 + n`: every run of each. `L` is the common
/// length of all runs, or 0 to take each run's own length.
#[inline(always)]
fn whole_elems<const L: usize>(
    runs: &[(isize, usize)],
    ext: isize,
    i0: usize,
    n: usize,
    mut done: usize,
    f: &mut impl FnMut(isize, usize, usize),
) -> usize {
    for k in 0..n {
        let base = (i0 + k) as isize * ext;
        for &(d, len) in runs {
            let len = if L == 0 { len } else { L };
            f(base + d, done, len);
            done += len;
        }
    }
    done
}

fn order_code(o: Order) -> i64 {
    match o {
        Order::C => 0,
        Order::Fortran => 1,
    }
}

/// Copy `n` bytes; small power-of-two sizes without a memcpy call.
///
/// # Safety
/// `s` readable and `d` writable for `n` bytes, not overlapping.
#[inline(always)]
unsafe fn copy_small(s: *const u8, d: *mut u8, n: usize) {
    // SAFETY: caller guarantees both ranges; unaligned accesses are used.
    unsafe {
        match n {
            4 => (d as *mut u32).write_unaligned((s as *const u32).read_unaligned()),
            8 => (d as *mut u64).write_unaligned((s as *const u64).read_unaligned()),
            16 => (d as *mut u128).write_unaligned((s as *const u128).read_unaligned()),
            2 => (d as *mut u16).write_unaligned((s as *const u16).read_unaligned()),
            1 => *d = *s,
            _ => std::ptr::copy_nonoverlapping(s, d, n),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::abi::consts as c;

    fn p(b: Basic) -> Arc<TypeDesc> {
        Arc::new(TypeDesc::predefined(b))
    }
    fn a(t: TypeDesc) -> Arc<TypeDesc> {
        Arc::new(t)
    }
    /// (lb, ub, extent, size, true_lb, true_ub)
    fn bounds(t: &TypeDesc) -> (isize, isize, isize, usize, isize, isize) {
        (t.lb(), t.ub(), t.extent(), t.size(), t.true_lb(), t.true_ub())
    }
    fn blk(t: &TypeDesc) -> Vec<(isize, Basic, usize)> {
        t.blocks().iter().map(|b| (b.disp, b.basic, b.count)).collect()
    }

    #[test]
    fn basic_sizes() {
        assert_eq!(Basic::LongDouble.size(), 16);
        assert_eq!(Basic::LongDoubleComplex.size(), 32);
        assert_eq!(Basic::WChar.size(), 4);
        assert_eq!(Basic::CBool.size(), 1);
        assert_eq!(Basic::Long.size(), 8);
        assert_eq!(Basic::Aint.size(), 8);
        assert_eq!(Basic::FloatComplex.align(), 4);
        for b in Basic::ALL {
            assert!(b.size() % b.align() == 0, "{}", b.name());
            let t = TypeDesc::predefined(*b);
            assert_eq!(
                bounds(&t),
                (0, b.size() as isize, b.size() as isize, b.size(), 0, b.size() as isize)
            );
            assert!(t.is_contiguous(7));
            assert_eq!(t.elem(), Some(Elem::Basic(*b)));
            assert_eq!(t.envelope(), (0, 0, 0, 0));
        }
    }

    #[test]
    fn names() {
        for &b in Basic::ALL {
            assert_eq!(Elem::from_name(b.name()), Some(Elem::Basic(b)));
        }
        for &e in Elem::PAIRS {
            assert_eq!(Elem::from_name(e.name()), Some(e));
        }
        assert_eq!(Elem::from_name("MPI_2INT"), Some(Elem::TWO_INT));
        assert_eq!(Elem::from_name("MPI_LONG_LONG_INT"), Some(Elem::Basic(Basic::LongLong)));
        assert_eq!(Elem::from_name("MPI_CXX_BOOL"), Some(Elem::Basic(Basic::CBool)));
        assert_eq!(Elem::from_name("MPI_REAL16"), None);
        assert_eq!(TypeDesc::named(Elem::DOUBLE_INT).extent(), 16);
    }

    #[test]
    fn pair_layouts() {
        let cases = [
            (Elem::FLOAT_INT, 8, 8, 4),
            (Elem::DOUBLE_INT, 16, 12, 8),
            (Elem::LONG_INT, 16, 12, 8),
            (Elem::TWO_INT, 8, 8, 4),
            (Elem::SHORT_INT, 8, 6, 4),
            (Elem::LONG_DOUBLE_INT, 32, 20, 16),
        ];
        for (e, ext, size, ioff) in cases {
            assert_eq!(e.extent(), ext, "{}", e.name());
            assert_eq!(e.size(), size, "{}", e.name());
            assert_eq!(e.index_offset(), ioff, "{}", e.name());
            let t = TypeDesc::pair(e);
            assert_eq!(t.extent(), ext as isize);
            assert_eq!(t.size(), size);
            assert_eq!(t.true_ub(), (ioff + 4) as isize);
            assert_eq!(t.elem(), Some(e));
        }
        assert!(TypeDesc::pair(Elem::TWO_INT).is_contiguous(5));
        assert!(!TypeDesc::pair(Elem::DOUBLE_INT).is_contiguous(1));
        // contiguous of pairs keeps the pair elem
        let di = a(TypeDesc::pair(Elem::DOUBLE_INT));
        let t = TypeDesc::contiguous(3, &di).unwrap();
        assert_eq!(t.elem(), Some(Elem::DOUBLE_INT));
        assert_eq!(bounds(&t), (0, 48, 48, 36, 0, 44));
    }

    #[test]
    fn contiguous_and_zero() {
        let t = TypeDesc::contiguous(3, &p(Basic::Int)).unwrap();
        assert_eq!(bounds(&t), (0, 12, 12, 12, 0, 12));
        assert_eq!(blk(&t), vec![(0, Basic::Int, 3)]);
        assert!(t.is_contiguous(10));
        let z = TypeDesc::contiguous(0, &p(Basic::Int)).unwrap();
        assert_eq!(bounds(&z), (0, 0, 0, 0, 0, 0));
        assert_eq!(z.elem(), Some(Elem::Basic(Basic::Int)));
        // an empty member does not spoil the elem of a struct
        let za = a(z.clone());
        let s = TypeDesc::create_struct(&[1, 1], &[0, 8], &[&p(Basic::Int), &za]).unwrap();
        assert_eq!(s.elem(), Some(Elem::Basic(Basic::Int)));
        assert!(z.blocks().is_empty());
        assert_eq!(
            TypeDesc::contiguous(-1, &p(Basic::Int)).unwrap_err().class,
            c::MPI_ERR_COUNT
        );
    }

    #[test]
    fn vector_bounds() {
        let t = TypeDesc::vector(3, 2, 4, &p(Basic::Double)).unwrap();
        assert_eq!(bounds(&t), (0, 80, 80, 48, 0, 80));
        assert_eq!(
            blk(&t),
            vec![(0, Basic::Double, 2), (32, Basic::Double, 2), (64, Basic::Double, 2)]
        );
        assert!(!t.is_contiguous(1));
        // stride == blocklen: merged to one block, contiguous
        let t = TypeDesc::vector(4, 2, 2, &p(Basic::Int)).unwrap();
        assert_eq!(blk(&t), vec![(0, Basic::Int, 8)]);
        assert!(t.is_contiguous(3));
        // negative stride
        let t = TypeDesc::vector(3, 1, -2, &p(Basic::Int)).unwrap();
        assert_eq!(bounds(&t), (-16, 4, 20, 12, -16, 4));
        assert_eq!(blk(&t)[0], (0, Basic::Int, 1));
        assert_eq!(
            TypeDesc::vector(2, -1, 2, &p(Basic::Int)).unwrap_err().class,
            c::MPI_ERR_ARG
        );
        assert_eq!(
            TypeDesc::vector(-2, 1, 2, &p(Basic::Int)).unwrap_err().class,
            c::MPI_ERR_COUNT
        );
        // hvector, bytes
        let t = TypeDesc::hvector(2, 3, 100, &p(Basic::Int)).unwrap();
        assert_eq!(bounds(&t), (0, 112, 112, 24, 0, 112));
        assert_eq!(t.kind(), CombinerKind::Hvector);
        let c = t.contents();
        assert_eq!((c.ints, c.addrs, c.types.len()), (vec![2, 3], vec![100], 1));
    }

    #[test]
    fn vector_of_vector() {
        let inner = a(TypeDesc::vector(2, 1, 2, &p(Basic::Int)).unwrap());
        assert_eq!(bounds(&inner), (0, 12, 12, 8, 0, 12));
        let t = TypeDesc::vector(3, 1, 2, &inner).unwrap();
        assert_eq!(bounds(&t), (0, 60, 60, 24, 0, 60));
        let d: Vec<isize> = t.blocks().iter().map(|b| b.disp).collect();
        assert_eq!(d, vec![0, 8, 24, 32, 48, 56]);
        assert_eq!(t.elem(), Some(Elem::Basic(Basic::Int)));
        let c = t.contents();
        assert_eq!(c.ints, vec![3, 1, 2]);
        assert!(Arc::ptr_eq(&c.types[0], &inner));
    }

    #[test]
    fn indexed_family() {
        let int = p(Basic::Int);
        let t = TypeDesc::indexed(&[2, 1], &[4, -1], &int).unwrap();
        assert_eq!(bounds(&t), (-4, 24, 28, 12, -4, 24));
        assert_eq!(blk(&t), vec![(16, Basic::Int, 2), (-4, Basic::Int, 1)]);
        assert_eq!(t.contents().ints, vec![2, 2, 1, 4, -1]);
        let t = TypeDesc::hindexed(&[1, 0, 2], &[3, 1000, 20], &int).unwrap();
        // zero-length block contributes nothing
        assert_eq!(bounds(&t), (3, 28, 25, 12, 3, 28));
        assert_eq!(t.contents().addrs, vec![3, 1000, 20]);
        let t = TypeDesc::indexed_block(2, &[0, 5], &int).unwrap();
        assert_eq!(bounds(&t), (0, 28, 28, 16, 0, 28));
        assert_eq!(t.contents().ints, vec![2, 2, 0, 5]);
        let t = TypeDesc::hindexed_block(1, &[-8, 8], &p(Basic::Double)).unwrap();
        assert_eq!(bounds(&t), (-8, 16, 24, 16, -8, 16));
        assert_eq!(
            TypeDesc::indexed(&[1, -1], &[0, 1], &int).unwrap_err().class,
            c::MPI_ERR_ARG
        );
        assert_eq!(
            TypeDesc::indexed_block(-1, &[0], &int).unwrap_err().class,
            c::MPI_ERR_ARG
        );
    }

    #[test]
    fn struct_padding() {
        let (ch, db, int) = (p(Basic::Char), p(Basic::Double), p(Basic::Int));
        let t = TypeDesc::create_struct(&[1, 1], &[0, 8], &[&ch, &db]).unwrap();
        assert_eq!(bounds(&t), (0, 16, 16, 9, 0, 16));
        let t = TypeDesc::create_struct(&[1, 1], &[0, 8], &[&db, &ch]).unwrap();
        assert_eq!(bounds(&t), (0, 16, 16, 9, 0, 9));
        assert_eq!(t.elem(), None);
        let t = TypeDesc::create_struct(&[1, 1], &[0, 4], &[&int, &ch]).unwrap();
        assert_eq!(bounds(&t), (0, 8, 8, 5, 0, 5));
        // struct { char c[3]; } : align 1, no padding
        let t = TypeDesc::create_struct(&[3], &[0], &[&ch]).unwrap();
        assert_eq!(bounds(&t), (0, 3, 3, 3, 0, 3));
        // negative displacement, padding relative to lb
        let t = TypeDesc::create_struct(&[1, 1], &[-8, 0], &[&db, &ch]).unwrap();
        assert_eq!(bounds(&t), (-8, 8, 16, 9, -8, 1));
        // contiguous of a padded struct uses the padded extent
        let s = a(TypeDesc::create_struct(&[1, 1], &[0, 8], &[&db, &ch]).unwrap());
        let t = TypeDesc::contiguous(2, &s).unwrap();
        assert_eq!(bounds(&t), (0, 32, 32, 18, 0, 25));
        assert_eq!(
            blk(&t),
            vec![
                (0, Basic::Double, 1),
                (8, Basic::Char, 1),
                (16, Basic::Double, 1),
                (24, Basic::Char, 1)
            ]
        );
        let c = s.contents();
        assert_eq!((c.ints, c.addrs, c.types.len()), (vec![2, 1, 1], vec![0, 8], 2));
        assert_eq!(
            TypeDesc::create_struct(&[1], &[0, 1], &[&ch]).unwrap_err().class,
            c::MPI_ERR_ARG
        );
    }

    #[test]
    fn resized_markers() {
        let int = p(Basic::Int);
        let r = a(TypeDesc::resized(&int, -2, 10).unwrap());
        assert_eq!(bounds(&r), (-2, 8, 10, 4, 0, 4));
        let t = TypeDesc::contiguous(2, &r).unwrap();
        assert_eq!(bounds(&t), (-2, 18, 20, 8, 0, 14));
        assert_eq!(blk(&t), vec![(0, Basic::Int, 1), (10, Basic::Int, 1)]);
        // markers win over data in a struct, and suppress padding
        let db = p(Basic::Double);
        let t = TypeDesc::create_struct(&[1, 1], &[0, 16], &[&r, &db]).unwrap();
        assert_eq!(bounds(&t), (-2, 8, 10, 12, 0, 24));
        assert_eq!(t.elem(), None);
        // resize to a larger extent makes a strided "vector"
        let r16 = a(TypeDesc::resized(&int, 0, 16).unwrap());
        let t = TypeDesc::contiguous(3, &r16).unwrap();
        assert_eq!(bounds(&t), (0, 48, 48, 12, 0, 36));
        assert_eq!(t.elem(), Some(Elem::Basic(Basic::Int)));
        assert!(!t.is_contiguous(1));
        // resized contiguous stays contiguous for one element only
        assert!(r16.is_contiguous(1));
        assert!(!r16.is_contiguous(2));
        let c = r.contents();
        assert_eq!((c.ints.len(), c.addrs, c.types.len()), (0, vec![-2, 10], 1));
        let d = TypeDesc::dup(&r);
        assert_eq!(bounds(&d), bounds(&r));
        assert_eq!(d.kind(), CombinerKind::Dup);
        assert_eq!(d.envelope(), (0, 0, 0, 1));
    }

    #[test]
    fn subarray_orders() {
        let int = p(Basic::Int);
        let t = TypeDesc::subarray(&[4, 5], &[2, 3], &[1, 2], Order::C, &int).unwrap();
        assert_eq!(bounds(&t), (0, 80, 80, 24, 28, 60));
        assert_eq!(blk(&t), vec![(28, Basic::Int, 3), (48, Basic::Int, 3)]);
        let t = TypeDesc::subarray(&[4, 5], &[2, 3], &[1, 2], Order::Fortran, &int).unwrap();
        assert_eq!(bounds(&t), (0, 80, 80, 24, 36, 76));
        assert_eq!(
            blk(&t),
            vec![(36, Basic::Int, 2), (52, Basic::Int, 2), (68, Basic::Int, 2)]
        );
        assert_eq!(t.kind(), CombinerKind::Subarray);
        assert_eq!(t.contents().ints, vec![2, 4, 5, 2, 3, 1, 2, 1]);
        // 3-d, C order, whole array = contiguous
        let t = TypeDesc::subarray(&[2, 3, 4], &[2, 3, 4], &[0, 0, 0], Order::C, &int).unwrap();
        assert_eq!(blk(&t), vec![(0, Basic::Int, 24)]);
        assert!(t.is_contiguous(2));
        assert!(TypeDesc::subarray(&[4], &[3], &[2], Order::C, &int).is_err());
        assert!(TypeDesc::subarray(&[4], &[5], &[0], Order::C, &int).is_err());
    }

    #[test]
    fn darray_layouts() {
        let int = p(Basic::Int);
        use Distrib::{Block, Cyclic};
        const NONE: Distrib = Distrib::None;
        // 1-d block over 3 processes of 10 elements: 4, 4, 2
        for (rank, start, n) in [(0, 0, 4), (1, 4, 4), (2, 8, 2)] {
            let t = TypeDesc::darray(3, rank, &[10], &[Block], &[None], &[3], Order::C, &int).unwrap();
            assert_eq!(blk(&t), vec![(start * 4, Basic::Int, n)]);
            assert_eq!((t.lb(), t.extent()), (0, 40));
        }
        // 1-d cyclic(2) over 2 processes of 7 elements: rank 1 has 2,3,6
        let t = TypeDesc::darray(2, 1, &[7], &[Cyclic], &[Some(2)], &[2], Order::C, &int).unwrap();
        assert_eq!(blk(&t), vec![(8, Basic::Int, 2), (24, Basic::Int, 1)]);
        assert_eq!((t.lb(), t.extent(), t.size()), (0, 28, 12));
        // 2-d 4x6, C order, 2x2 grid, block x block: rank 3 has rows 2..4, cols 3..6
        let t = TypeDesc::darray(4, 3, &[4, 6], &[Block, Block], &[None, None], &[2, 2], Order::C, &int).unwrap();
        assert_eq!(
            blk(&t),
            vec![((2 * 6 + 3) * 4, Basic::Int, 3), ((3 * 6 + 3) * 4, Basic::Int, 3)]
        );
        assert_eq!((t.lb(), t.extent(), t.size()), (0, 96, 24));
        // equals the subarray with the same box
        let s = TypeDesc::subarray(&[4, 6], &[2, 3], &[2, 3], Order::C, &int).unwrap();
        assert_eq!(blk(&s), blk(&t));
        // 2-d 4x3 Fortran order, 2x1 grid, cyclic rows x none: rank 1 has rows 1 and 3
        let t = TypeDesc::darray(
            2,
            1,
            &[4, 3],
            &[Cyclic, NONE],
            &[None, None],
            &[2, 1],
            Order::Fortran,
            &int,
        )
        .unwrap();
        let d: Vec<isize> = t.blocks().iter().map(|b| b.disp / 4).collect();
        assert_eq!(d, vec![1, 3, 5, 7, 9, 11]);
        // 2-d cyclic(2) in the outer dimension of a C array: rows 0,1 and 4 of 5 rows, 2 cols
        let t = TypeDesc::darray(
            2,
            0,
            &[5, 2],
            &[Cyclic, NONE],
            &[Some(2), None],
            &[2, 1],
            Order::C,
            &int,
        )
        .unwrap();
        assert_eq!(blk(&t), vec![(0, Basic::Int, 4), (32, Basic::Int, 2)]);
        assert_eq!(t.extent(), 40);
        // every element is owned exactly once over all ranks
        let (g, ps) = ([5i64, 7, 3], [2i64, 3, 1]);
        let mut seen = vec![0; 105];
        for rank in 0..6 {
            let t = TypeDesc::darray(
                6,
                rank,
                &g,
                &[Cyclic, Block, NONE],
                &[Some(2), None, None],
                &ps,
                Order::C,
                &int,
            )
            .unwrap();
            for b in t.blocks() {
                for k in 0..b.count {
                    seen[b.disp as usize / 4 + k] += 1;
                }
            }
        }
        assert!(seen.iter().all(|&n| n == 1));
        let c = t.contents();
        assert_eq!(c.ints, vec![2, 0, 2, 5, 2, 1, 2, 2, -1, 2, 1, 0]);
        assert!(TypeDesc::darray(4, 4, &[4], &[Block], &[None], &[4], Order::C, &int).is_err());
        assert!(TypeDesc::darray(3, 0, &[4], &[Block], &[None], &[2], Order::C, &int).is_err());
        assert!(TypeDesc::darray(2, 0, &[9], &[Block], &[Some(4)], &[2], Order::C, &int).is_err());
    }

    #[test]
    fn large_count_contents() {
        let int = p(Basic::Int);
        let t = TypeDesc::hvector(2, 3, 100, &int).unwrap().with_large_counts();
        let c = t.contents();
        assert_eq!((c.ints.len(), c.addrs.len(), c.large.clone()), (0, 0, vec![2, 3, 100]));
        assert_eq!(t.envelope(), (0, 0, 3, 1));
        let t = TypeDesc::subarray(&[4, 5], &[2, 3], &[1, 2], Order::Fortran, &int)
            .unwrap()
            .with_large_counts();
        let c = t.contents();
        assert_eq!((c.ints, c.large), (vec![2, 1], vec![4, 5, 2, 3, 1, 2]));
        let t = TypeDesc::darray(2, 1, &[7], &[Distrib::Cyclic], &[Some(2)], &[2], Order::C, &int)
            .unwrap()
            .with_large_counts();
        let c = t.contents();
        assert_eq!((c.ints, c.large), (vec![2, 1, 1, 1, 2, 2, 0], vec![7]));
        let r = TypeDesc::resized(&int, -4, 16).unwrap().with_large_counts();
        assert_eq!(r.contents().large, vec![-4, 16]);
        assert_eq!(
            TypeDesc::predefined(Basic::Int).with_large_counts().envelope(),
            (0, 0, 0, 0)
        );
    }

    #[test]
    fn elem_detection() {
        let (int, db) = (p(Basic::Int), p(Basic::Double));
        assert_eq!(
            TypeDesc::vector(3, 1, 2, &db).unwrap().elem(),
            Some(Elem::Basic(Basic::Double))
        );
        assert_eq!(
            TypeDesc::create_struct(&[1, 1], &[0, 8], &[&int, &db]).unwrap().elem(),
            None
        );
        assert_eq!(
            TypeDesc::create_struct(&[1, 2], &[0, 8], &[&int, &int]).unwrap().elem(),
            Some(Elem::Basic(Basic::Int))
        );
        let pi = a(TypeDesc::pair(Elem::SHORT_INT));
        assert_eq!(TypeDesc::vector(2, 1, 3, &pi).unwrap().elem(), Some(Elem::SHORT_INT));
        // a user struct {double, int} is not a pair type
        let t = TypeDesc::create_struct(&[1, 1], &[0, 8], &[&db, &int]).unwrap();
        assert_eq!(bounds(&t), (0, 16, 16, 12, 0, 12));
        assert_eq!(t.elem(), None);
        // pairs mixed with ints are nothing
        assert_eq!(
            TypeDesc::create_struct(&[1, 1], &[0, 8], &[&pi, &int]).unwrap().elem(),
            None
        );
    }

    fn pattern(n: usize) -> Vec<u8> {
        (0..n).map(|i| (i * 7 + 3) as u8).collect()
    }

    /// Reference pack through the type map, element by element, byte by byte.
    fn ref_pack(t: &TypeDesc, count: usize, buf: &[u8], origin: isize) -> Vec<u8> {
        let mut out = Vec::new();
        for i in 0..count {
            for b in t.blocks() {
                for k in 0..b.bytes() {
                    out.push(buf[(origin + i as isize * t.extent() + b.disp + k as isize) as usize]);
                }
            }
        }
        out
    }

    fn check_roundtrip(t: &TypeDesc, count: usize) {
        // origin so that negative displacements stay in the buffer
        let lo = t
            .true_lb()
            .min(t.true_lb() + (count as isize - 1).max(0) * t.extent())
            .min(0);
        let origin = -lo + 3; // odd: unaligned
        let span = (origin + t.true_ub().max(t.true_ub() + (count as isize - 1).max(0) * t.extent()) + 8) as usize;
        let buf = pattern(span);
        let expect = ref_pack(t, count, &buf, origin);
        assert_eq!(expect.len(), t.packed_size(count));
        let mut packed = vec![0u8; t.packed_size(count)];
        // SAFETY: buf covers every byte of the type map of `count` elements at origin.
        let n = unsafe { t.pack(count, buf.as_ptr().offset(origin), &mut packed) };
        assert_eq!(n, packed.len());
        assert_eq!(packed, expect);
        // partial packing by every chunk size in a small set equals the whole
        for chunk in [1usize, 3, 5, 8, 13, 64] {
            let mut part = vec![0u8; packed.len()];
            let mut off = 0;
            while off < part.len() {
                let end = (off + chunk).min(part.len());
                // SAFETY: as above.
                let n = unsafe { t.pack_range(count, buf.as_ptr().offset(origin), off, &mut part[off..end]) };
                assert_eq!(n, end - off);
                off = end;
            }
            assert_eq!(part, packed, "chunk {chunk}");
        }
        // unpack into zeroes, whole and in pieces: touched bytes equal, others stay 0
        for chunk in [usize::MAX, 1, 7] {
            let mut out = vec![0u8; span];
            let mut off = 0;
            while off < packed.len() {
                let end = off.saturating_add(chunk).min(packed.len());
                // SAFETY: out has the same span as buf.
                let n = unsafe { t.unpack_range(count, &packed[off..end], off, out.as_mut_ptr().offset(origin)) };
                assert_eq!(n, end - off);
                off = end;
            }
            assert_eq!(ref_pack(t, count, &out, origin), packed);
            let touched: usize = out.iter().zip(&buf).filter(|(o, b)| o == b && **o != 0).count();
            assert!(touched <= packed.len());
        }
        // a short destination gets a prefix
        if packed.len() > 2 {
            let mut short = vec![0u8; packed.len() - 2];
            // SAFETY: as above.
            let n = unsafe { t.pack(count, buf.as_ptr().offset(origin), &mut short) };
            assert_eq!(n, short.len());
            assert_eq!(short[..], packed[..short.len()]);
        }
    }

    #[test]
    fn pack_roundtrips() {
        let (int, db, ch) = (p(Basic::Int), p(Basic::Double), p(Basic::Char));
        let inner = a(TypeDesc::vector(2, 1, 2, &int).unwrap());
        let r = a(TypeDesc::resized(&int, -2, 10).unwrap());
        let types = vec![
            TypeDesc::predefined(Basic::Double),
            TypeDesc::pair(Elem::DOUBLE_INT),
            TypeDesc::pair(Elem::LONG_DOUBLE_INT),
            TypeDesc::contiguous(5, &int).unwrap(),
            TypeDesc::vector(3, 2, 4, &db).unwrap(),
            TypeDesc::vector(3, 1, -2, &int).unwrap(),
            TypeDesc::vector(3, 1, 2, &inner).unwrap(),
            TypeDesc::indexed(&[2, 1], &[4, -1], &int).unwrap(),
            TypeDesc::create_struct(&[1, 3, 1], &[0, 8, 20], &[&db, &ch, &int]).unwrap(),
            TypeDesc::contiguous(2, &r).unwrap(),
            TypeDesc::subarray(&[4, 5], &[2, 3], &[1, 2], Order::C, &int).unwrap(),
            TypeDesc::contiguous(0, &int).unwrap(),
        ];
        for t in &types {
            for count in [0, 1, 2, 5] {
                check_roundtrip(t, count);
            }
        }
    }

    #[test]
    fn pieces() {
        let t = TypeDesc::vector(3, 2, 4, &p(Basic::Int)).unwrap();
        let mut v = Vec::new();
        let n = t.for_each_piece(2, 6, 100, |m, w, l| v.push((m, w, l)));
        // stream of 2 elements: 48 bytes; from byte 6: rest of run 0, runs 1, 2, then element 1
        assert_eq!(n, 42);
        assert_eq!(
            v,
            vec![
                (6, 0, 2),
                (16, 2, 8),
                (32, 10, 8),
                (40, 18, 8),
                (56, 26, 8),
                (72, 34, 8)
            ]
        );
        let c = TypeDesc::contiguous(4, &p(Basic::Int)).unwrap();
        let mut v = Vec::new();
        c.for_each_piece(10, 4, 20, |m, w, l| v.push((m, w, l)));
        assert_eq!(v, vec![(4, 0, 20)]);
    }

    #[test]
    fn contiguous_pack_offsets_true_lb() {
        // a contiguous type whose data starts at true_lb = 8
        let t = TypeDesc::hindexed(&[2], &[8], &p(Basic::Int)).unwrap();
        assert!(t.is_contiguous(1));
        let buf = pattern(32);
        let mut out = [0u8; 8];
        // SAFETY: buf holds bytes 8..16.
        unsafe { t.pack(1, buf.as_ptr(), &mut out) };
        assert_eq!(out[..], buf[8..16]);
    }

    #[test]
    fn huge_counts() {
        let int = p(Basic::Int);
        let t = TypeDesc::contiguous(1 << 40, &int).unwrap();
        assert_eq!(blk(&t), vec![(0, Basic::Int, 1 << 40)]);
        assert_eq!(t.size(), 4 << 40);
        let t = TypeDesc::vector(1 << 40, 2, 2, &int).unwrap();
        assert_eq!(blk(&t), vec![(0, Basic::Int, 2 << 40)]);
        let t = TypeDesc::vector(1 << 40, 0, 2, &int).unwrap();
        assert_eq!(bounds(&t), (0, 0, 0, 0, 0, 0));
        let e = TypeDesc::vector(1 << 40, 1, 2, &int).unwrap_err();
        assert_eq!(e.class, c::MPI_ERR_NO_MEM);
        let v = a(TypeDesc::vector(2, 1, 2, &int).unwrap());
        let e = TypeDesc::contiguous(1 << 40, &v).unwrap_err();
        assert_eq!(e.class, c::MPI_ERR_NO_MEM);
        // contiguous of a dense struct merges
        let s = a(TypeDesc::create_struct(&[2], &[0], &[&int]).unwrap());
        assert_eq!(
            blk(&TypeDesc::contiguous(1000, &s).unwrap()),
            vec![(0, Basic::Int, 2000)]
        );
    }

    #[test]
    fn count_and_elements() {
        let (int, db, ch) = (p(Basic::Int), p(Basic::Double), p(Basic::Char));
        let s = TypeDesc::create_struct(&[1, 3], &[0, 8], &[&db, &ch]).unwrap();
        assert_eq!(s.size(), 11);
        assert_eq!(s.count_of(22), Some(2));
        assert_eq!(s.count_of(23), None);
        assert_eq!(s.elements_of(22), Some(8));
        assert_eq!(s.elements_of(22 + 8), Some(9));
        assert_eq!(s.elements_of(22 + 10), Some(11));
        assert_eq!(s.elements_of(22 + 4), None);
        assert_eq!(TypeDesc::pair(Elem::DOUBLE_INT).elements_of(24), Some(4));
        let z = TypeDesc::contiguous(0, &int).unwrap();
        assert_eq!(
            (z.count_of(0), z.elements_of(0), z.count_of(4)),
            (Some(0), Some(0), None)
        );
        assert_eq!(TypeDesc::predefined(Basic::Int).elements_of(6), None);
    }

    #[test]
    fn many_small_blocks() {
        let n = 1_000_000usize;
        let t = TypeDesc::vector(n as i64, 1, 2, &p(Basic::Int)).unwrap();
        assert_eq!(t.blocks().len(), n);
        let src: Vec<i32> = (0..2 * n as i32).collect();
        let mut packed = vec![0u8; t.packed_size(1)];
        // SAFETY: src holds 2n ints, the type touches ints 0, 2, .., 2n-2.
        unsafe { t.pack(1, src.as_ptr() as *const u8, &mut packed) };
        for (i, ch) in packed.chunks_exact(4).enumerate() {
            assert_eq!(i32::from_ne_bytes(ch.try_into().unwrap()), 2 * i as i32);
        }
        let mut back = vec![-1i32; 2 * n];
        // SAFETY: back has the same size as src.
        unsafe { t.unpack(1, &packed, back.as_mut_ptr() as *mut u8) };
        for i in 0..n {
            assert_eq!(back[2 * i], 2 * i as i32);
            assert_eq!(back[2 * i + 1], -1);
        }
    }

    /// The type map of `t` expanded naively from its constructor arguments,
    /// independently of the flattening code: one (disp, basic) per value.
    fn naive(t: &TypeDesc) -> Vec<(isize, Basic)> {
        let shift = |v: &[(isize, Basic)], by: isize, out: &mut Vec<(isize, Basic)>| {
            out.extend(v.iter().map(|&(d, b)| (d + by, b)));
        };
        let mut out = Vec::new();
        match t.combiner() {
            Combiner::Named(Elem::Basic(b)) => out.push((0, *b)),
            Combiner::Named(e @ Elem::Pair(v, i)) => {
                out.push((0, *v));
                out.push((e.index_offset() as isize, *i));
            }
            Combiner::Dup(old) | Combiner::Resized { old, .. } => out = naive(old),
            Combiner::Contiguous { count, old } => {
                let m = naive(old);
                for k in 0..*count as isize {
                    shift(&m, k * old.extent(), &mut out);
                }
            }
            Combiner::Vector {
                count,
                blocklen,
                stride,
                old,
            } => {
                let m = naive(old);
                for i in 0..*count as isize {
                    for j in 0..*blocklen as isize {
                        shift(&m, (i * *stride as isize + j) * old.extent(), &mut out);
                    }
                }
            }
            Combiner::Hvector {
                count,
                blocklen,
                stride,
                old,
            } => {
                let m = naive(old);
                for i in 0..*count as isize {
                    for j in 0..*blocklen as isize {
                        shift(&m, i * stride + j * old.extent(), &mut out);
                    }
                }
            }
            Combiner::Indexed { blocklens, disps, old } => {
                let m = naive(old);
                for (bl, d) in blocklens.iter().zip(disps) {
                    for j in 0..*bl as isize {
                        shift(&m, (*d as isize + j) * old.extent(), &mut out);
                    }
                }
            }
            Combiner::Hindexed { blocklens, disps, old } => {
                let m = naive(old);
                for (bl, d) in blocklens.iter().zip(disps) {
                    for j in 0..*bl as isize {
                        shift(&m, d + j * old.extent(), &mut out);
                    }
                }
            }
            Combiner::IndexedBlock { blocklen, disps, old } => {
                let m = naive(old);
                for d in disps {
                    for j in 0..*blocklen as isize {
                        shift(&m, (*d as isize + j) * old.extent(), &mut out);
                    }
                }
            }
            Combiner::HindexedBlock { blocklen, disps, old } => {
                let m = naive(old);
                for d in disps {
                    for j in 0..*blocklen as isize {
                        shift(&m, d + j * old.extent(), &mut out);
                    }
                }
            }
            Combiner::Struct {
                blocklens,
                disps,
                types,
            } => {
                for ((bl, d), ty) in blocklens.iter().zip(disps).zip(types) {
                    let m = naive(ty);
                    for j in 0..*bl as isize {
                        shift(&m, d + j * ty.extent(), &mut out);
                    }
                }
            }
            Combiner::Subarray {
                sizes,
                subsizes,
                starts,
                order,
                old,
            } => {
                let m = naive(old);
                let nd = sizes.len();
                let fast: Vec<usize> = match order {
                    Order::C => (0..nd).rev().collect(),
                    Order::Fortran => (0..nd).collect(),
                };
                let mut stride = vec![0isize; nd];
                let mut acc = old.extent();
                for &d in &fast {
                    stride[d] = acc;
                    acc *= sizes[d] as isize;
                }
                let total: i64 = subsizes.iter().product();
                for mut lin in 0..total {
                    let mut disp = 0;
                    for &d in &fast {
                        disp += (starts[d] + lin % subsizes[d]) as isize * stride[d];
                        lin /= subsizes[d];
                    }
                    shift(&m, disp, &mut out);
                }
            }
            Combiner::Darray {
                size,
                rank,
                gsizes,
                distribs,
                dargs,
                psizes,
                order,
                old,
            } => {
                let m = naive(old);
                let nd = gsizes.len();
                let fast: Vec<usize> = match order {
                    Order::C => (0..nd).rev().collect(),
                    Order::Fortran => (0..nd).collect(),
                };
                let mut coords = vec![0i64; nd];
                let (mut left, mut r) = (*size, *rank);
                for d in 0..nd {
                    left /= psizes[d];
                    coords[d] = r / left;
                    r %= left;
                }
                let owner = |d: usize, g: i64| -> i64 {
                    let p = psizes[d];
                    match distribs[d] {
                        Distrib::None => coords[d],
                        Distrib::Block => g / dargs[d].unwrap_or((gsizes[d] + p - 1) / p),
                        Distrib::Cyclic => (g / dargs[d].unwrap_or(1)) % p,
                    }
                };
                let total: i64 = gsizes.iter().product();
                for lin0 in 0..total {
                    let (mut lin, mut disp, mut mine, mut acc) = (lin0, 0isize, true, old.extent());
                    for &d in &fast {
                        let g = lin % gsizes[d];
                        lin /= gsizes[d];
                        mine &= owner(d, g) == coords[d];
                        disp += g as isize * acc;
                        acc *= gsizes[d] as isize;
                    }
                    if mine {
                        shift(&m, disp, &mut out);
                    }
                }
            }
        }
        out
    }

    fn expand(t: &TypeDesc) -> Vec<(isize, Basic)> {
        let mut out = Vec::new();
        for b in t.blocks() {
            for k in 0..b.count {
                out.push((b.disp + (k * b.basic.size()) as isize, b.basic));
            }
        }
        out
    }

    /// Small deterministic generator (no dependencies).
    struct Lcg(u64);
    impl Lcg {
        fn next(&mut self, n: u64) -> u64 {
            self.0 = self
                .0
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (self.0 >> 33) % n
        }
        fn int(&mut self, lo: i64, hi: i64) -> i64 {
            lo + self.next((hi - lo + 1) as u64) as i64
        }
    }

    fn random_type(g: &mut Lcg, depth: u32) -> Arc<TypeDesc> {
        let leaf = [
            Basic::Char,
            Basic::Short,
            Basic::Int,
            Basic::Double,
            Basic::LongDouble,
            Basic::FloatComplex,
        ];
        if depth == 0 || g.next(4) == 0 {
            return match g.next(6) {
                0 => a(TypeDesc::pair(Elem::PAIRS[g.next(6) as usize])),
                _ => p(leaf[g.next(leaf.len() as u64) as usize]),
            };
        }
        let old = random_type(g, depth - 1);
        let n = g.int(0, 3);
        let t = match g.next(12) {
            0 => TypeDesc::contiguous(n, &old),
            1 => TypeDesc::vector(n, g.int(0, 3), g.int(-4, 4), &old),
            2 => TypeDesc::hvector(n, g.int(0, 2), g.int(-40, 40) as isize, &old),
            3 => {
                let bl: Vec<i64> = (0..n).map(|_| g.int(0, 3)).collect();
                let d: Vec<i64> = (0..n).map(|_| g.int(-5, 5)).collect();
                TypeDesc::indexed(&bl, &d, &old)
            }
            4 => {
                let bl: Vec<i64> = (0..n).map(|_| g.int(0, 3)).collect();
                let d: Vec<isize> = (0..n).map(|_| g.int(-50, 50) as isize).collect();
                TypeDesc::hindexed(&bl, &d, &old)
            }
            5 => {
                let d: Vec<i64> = (0..n).map(|_| g.int(-5, 5)).collect();
                TypeDesc::indexed_block(g.int(0, 2), &d, &old)
            }
            6 => {
                let other = random_type(g, depth - 1);
                let d = [g.int(-30, 30) as isize, g.int(-30, 30) as isize];
                TypeDesc::create_struct(&[g.int(0, 2), g.int(1, 2)], &d, &[&old, &other])
            }
            7 => TypeDesc::resized(&old, g.int(-8, 8) as isize, g.int(0, 48) as isize),
            8 => {
                let nd = g.int(1, 3) as usize;
                let sizes: Vec<i64> = (0..nd).map(|_| g.int(1, 4)).collect();
                let sub: Vec<i64> = sizes.iter().map(|&s| g.int(0, s)).collect();
                let st: Vec<i64> = sizes.iter().zip(&sub).map(|(&s, &u)| g.int(0, s - u)).collect();
                let o = if g.next(2) == 0 { Order::C } else { Order::Fortran };
                TypeDesc::subarray(&sizes, &sub, &st, o, &old)
            }
            9 => {
                let nd = g.int(1, 3) as usize;
                let gs: Vec<i64> = (0..nd).map(|_| g.int(1, 6)).collect();
                let ps: Vec<i64> = (0..nd).map(|_| g.int(1, 3)).collect();
                let mut ds = Vec::new();
                let mut da = Vec::new();
                let mut ps2 = ps;
                for psize in ps2.iter_mut() {
                    match g.next(3) {
                        0 => {
                            ds.push(Distrib::None);
                            da.push(None);
                            *psize = 1;
                        }
                        1 => {
                            ds.push(Distrib::Block);
                            da.push(None);
                        }
                        _ => {
                            ds.push(Distrib::Cyclic);
                            da.push(if g.next(2) == 0 { None } else { Some(g.int(1, 3)) });
                        }
                    }
                }
                let size: i64 = ps2.iter().product();
                let o = if g.next(2) == 0 { Order::C } else { Order::Fortran };
                TypeDesc::darray(size, g.int(0, size - 1), &gs, &ds, &da, &ps2, o, &old)
            }
            10 => {
                let d: Vec<isize> = (0..n).map(|_| g.int(-50, 50) as isize).collect();
                TypeDesc::hindexed_block(g.int(0, 2), &d, &old)
            }
            _ => Ok(TypeDesc::dup(&old)),
        };
        a(t.unwrap())
    }

    #[test]
    fn random_types_match_naive_expansion() {
        let mut g = Lcg(0x5eed);
        let mut kinds = Vec::new();
        let mut nonempty = 0;
        for iter in 0..3000 {
            let t = random_type(&mut g, 3);
            let want = naive(&t);
            if !kinds.contains(&t.kind()) {
                kinds.push(t.kind());
            }
            nonempty += (t.blocks().len() > 1) as usize;
            assert_eq!(expand(&t), want, "type map, iteration {iter}: {:?}", t.combiner());
            assert_eq!(t.size(), want.iter().map(|x| x.1.size()).sum::<usize>());
            if let Some(lo) = want.iter().map(|x| x.0).min() {
                assert_eq!(t.true_lb(), lo, "iteration {iter}");
                assert_eq!(
                    t.true_ub(),
                    want.iter().map(|x| x.0 + x.1.size() as isize).max().unwrap()
                );
            }
            // blocks are maximal: no two neighbours could have been merged
            for w in t.blocks().windows(2) {
                assert!(!(w[0].basic == w[1].basic && w[0].disp + w[0].bytes() as isize == w[1].disp));
            }
            if t.size() > 0 && t.size() < 4096 && t.extent() >= 0 {
                check_roundtrip(&t, (iter % 3) + 1);
            }
        }
        assert_eq!(kinds.len(), 13, "{kinds:?}");
        assert!(nonempty > 500, "{nonempty}");
    }
}

#[cfg(test)]
mod bench {
    //! `cargo test --release --lib mpi::datatype::bench -- --ignored --nocapture`
    use super::*;
    use std::time::Instant;

    fn rate(what: &str, bytes: usize, reps: usize, mut f: impl FnMut()) {
        f();
        let t = Instant::now();
        for _ in 0..reps {
            f();
        }
        println!(
            "{what}: {:.2} GB/s",
            (bytes * reps) as f64 / t.elapsed().as_secs_f64() / 1e9
        );
    }

    #[test]
    #[ignore]
    fn pack_throughput() {
        let int = Arc::new(TypeDesc::predefined(Basic::Int));
        let db = Arc::new(TypeDesc::predefined(Basic::Double));
        let n = 1 << 20;
        let src = vec![3u8; 32 * n];
        let cases = [
            ("vector 1 int stride 2", TypeDesc::vector(n as i64, 1, 2, &int).unwrap()),
            (
                "vector 2 double stride 3",
                TypeDesc::vector(n as i64 / 2, 2, 3, &db).unwrap(),
            ),
            (
                "vector 256 double stride 512",
                TypeDesc::vector(n as i64 / 256, 256, 512, &db).unwrap(),
            ),
            ("contiguous", TypeDesc::contiguous(n as i64, &db).unwrap()),
        ];
        for (name, t) in cases {
            let mut dst = vec![0u8; t.packed_size(1)];
            // SAFETY: src covers 32n bytes, more than any case's extent.
            rate(name, dst.len(), 20, || unsafe {
                t.pack(1, src.as_ptr(), &mut dst);
            });
        }
        // pair type: 1M DOUBLE_INT elements (not contiguous: 12 of 16 bytes)
        let t = TypeDesc::pair(Elem::DOUBLE_INT);
        let mut dst = vec![0u8; t.packed_size(n)];
        // SAFETY: 16n bytes of src.
        rate("DOUBLE_INT x 1M", dst.len(), 20, || unsafe {
            t.pack(n, src.as_ptr(), &mut dst);
        });
    }
}
