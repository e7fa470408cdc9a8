//! Process groups: an ordered list of world ranks, with the set operations of
//! MPI chapter 7. Pure logic, no handles.

use crate::mpi::error::MpiResult;
use crate::mpi_bail;
use crate::standard::consts as c;

#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct Group {
    /// Group rank -> world rank.
    pub ranks: Vec<usize>,
}

impl Group {
    pub fn new(ranks: Vec<usize>) -> Self {
        Group { ranks }
    }
    pub fn size(&self) -> usize {
        self.ranks.len()
    }
    /// The group rank of a world rank.
    pub fn rank_of(&self, world: usize) -> Option<usize> {
        self.ranks.iter().position(|&r| r == world)
    }

    fn check_rank(&self, r: i32, what: &str) -> MpiResult<usize> {
        if r < 0 || r as usize >= self.size() {
            mpi_bail!(
                MPI_ERR_RANK,
                "{what} {r} is not in a group of size {}",
                self.size()
            );
        }
        Ok(r as usize)
    }

    pub fn incl(&self, ranks: &[i32]) -> MpiResult<Group> {
        let mut seen = vec![false; self.size()];
        let mut out = Vec::with_capacity(ranks.len());
        for &r in ranks {
            let r = self.check_rank(r, "rank")?;
            if std::mem::replace(&mut seen[r], true) {
                mpi_bail!(MPI_ERR_RANK, "rank {r} appears twice");
            }
            out.push(self.ranks[r]);
        }
        Ok(Group::new(out))
    }

    pub fn excl(&self, ranks: &[i32]) -> MpiResult<Group> {
        let mut drop = vec![false; self.size()];
        for &r in ranks {
            let r = self.check_rank(r, "rank")?;
            if std::mem::replace(&mut drop[r], true) {
                mpi_bail!(MPI_ERR_RANK, "rank {r} appears twice");
            }
        }
        Ok(Group::new(
            self.ranks
                .iter()
                .enumerate()
                .filter(|(i, _)| !drop[*i])
                .map(|(_, &w)| w)
                .collect(),
        ))
    }

    /// Expand (first, last, stride) triplets into ranks.
    pub fn expand_ranges(&self, ranges: &[[i32; 3]]) -> MpiResult<Vec<i32>> {
        let mut out = Vec::new();
        for &[first, last, stride] in ranges {
            if stride == 0 {
                mpi_bail!(
                    MPI_ERR_ARG,
                    "range ({first}, {last}, {stride}) has stride 0"
                );
            }
            self.check_rank(first, "range start")?;
            self.check_rank(last, "range end")?;
            if (stride > 0 && first > last) || (stride < 0 && first < last) {
                continue;
            }
            let mut r = first;
            while (stride > 0 && r <= last) || (stride < 0 && r >= last) {
                out.push(r);
                r += stride;
            }
        }
        Ok(out)
    }

    pub fn union(&self, other: &Group) -> Group {
        let mut out = self.ranks.clone();
        for &w in &other.ranks {
            if !self.ranks.contains(&w) {
                out.push(w);
            }
        }
        Group::new(out)
    }
    pub fn intersection(&self, other: &Group) -> Group {
        Group::new(
            self.ranks
                .iter()
                .copied()
                .filter(|w| other.ranks.contains(w))
                .collect(),
        )
    }
    pub fn difference(&self, other: &Group) -> Group {
        Group::new(
            self.ranks
                .iter()
                .copied()
                .filter(|w| !other.ranks.contains(w))
                .collect(),
        )
    }

    /// MPI_IDENT, MPI_SIMILAR or MPI_UNEQUAL.
    pub fn compare(&self, other: &Group) -> i32 {
        if self.ranks == other.ranks {
            c::MPI_IDENT
        } else if self.size() == other.size() && self.ranks.iter().all(|w| other.ranks.contains(w))
        {
            c::MPI_SIMILAR
        } else {
            c::MPI_UNEQUAL
        }
    }

    /// Translate ranks of `self` into ranks of `other` (MPI_UNDEFINED where absent; PROC_NULL kept).
    pub fn translate(&self, ranks: &[i32], other: &Group) -> MpiResult<Vec<i32>> {
        ranks
            .iter()
            .map(|&r| {
                if r == c::MPI_PROC_NULL {
                    return Ok(c::MPI_PROC_NULL);
                }
                let r = self.check_rank(r, "rank")?;
                Ok(other
                    .rank_of(self.ranks[r])
                    .map(|x| x as i32)
                    .unwrap_or(c::MPI_UNDEFINED))
            })
            .collect()
    }

    /// The group of a split: members with `color`, ordered by (key, old rank).
    pub fn split_order(entries: &[(i32, i32, usize)], color: i32) -> Vec<usize> {
        let mut v: Vec<(i32, usize, usize)> = entries
            .iter()
            .enumerate()
            .filter(|(_, e)| e.0 == color)
            .map(|(old, e)| (e.1, old, e.2))
            .collect();
        v.sort();
        v.into_iter().map(|(_, _, w)| w).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn g(v: &[usize]) -> Group {
        Group::new(v.to_vec())
    }

    #[test]
    fn set_operations() {
        let a = g(&[0, 1, 2, 3, 4]);
        assert_eq!(a.incl(&[4, 0]).unwrap().ranks, vec![4, 0]);
        assert_eq!(a.excl(&[1, 3]).unwrap().ranks, vec![0, 2, 4]);
        assert_eq!(a.incl(&[5]).unwrap_err().class, c::MPI_ERR_RANK);
        assert_eq!(a.incl(&[1, 1]).unwrap_err().class, c::MPI_ERR_RANK);
        let b = g(&[3, 5, 1]);
        assert_eq!(a.union(&b).ranks, vec![0, 1, 2, 3, 4, 5]);
        assert_eq!(a.intersection(&b).ranks, vec![1, 3]);
        assert_eq!(a.difference(&b).ranks, vec![0, 2, 4]);
        assert_eq!(g(&[1, 2]).compare(&g(&[1, 2])), c::MPI_IDENT);
        assert_eq!(g(&[1, 2]).compare(&g(&[2, 1])), c::MPI_SIMILAR);
        assert_eq!(g(&[1, 2]).compare(&g(&[2, 3])), c::MPI_UNEQUAL);
        assert_eq!(
            b.translate(&[0, 1, 2, c::MPI_PROC_NULL], &a).unwrap(),
            vec![3, c::MPI_UNDEFINED, 1, c::MPI_PROC_NULL]
        );
    }

    #[test]
    fn ranges_and_split() {
        let a = g(&(0..10).collect::<Vec<_>>());
        assert_eq!(
            a.expand_ranges(&[[0, 9, 3], [8, 6, -1]]).unwrap(),
            vec![0, 3, 6, 9, 8, 7, 6]
        );
        assert_eq!(
            a.expand_ranges(&[[0, 3, 0]]).unwrap_err().class,
            c::MPI_ERR_ARG
        );
        // (color, key, world)
        let e = [(0, 5, 10), (1, 0, 11), (0, 1, 12), (0, 1, 13)];
        assert_eq!(Group::split_order(&e, 0), vec![12, 13, 10]);
        assert_eq!(Group::split_order(&e, 1), vec![11]);
    }
}
