//! Named shared host memory, as the GPU paths without peer access need it (the host regions
//! of `hostmem`, the pipes of `pipe`): a region one rank creates under a name and every other
//! rank of the job maps by that name. The GPU layer does not own such memory; the caller that
//! sets up the GPU paths hands it in (the shared-memory transport's regions, named after the
//! job), so the same code runs over any provider.

/// One mapped region. Dropping it unmaps it (and removes its name if still there).
pub trait SharedRegion: Send + Sync {
    /// Start of the mapping.
    fn as_ptr(&self) -> *mut u8;
    /// Bytes mapped.
    fn bytes(&self) -> usize;
    /// Remove the name once every rank has mapped the region; the mappings stay valid.
    fn unlink(&self);
}

/// The provider of named regions of this job.
pub trait SharedMem: Sync {
    /// Create (replacing a stale one of the same name) and map this rank's zero-filled region
    /// `tag` of `len` bytes.
    fn create(&self, tag: &str, len: usize) -> Result<Box<dyn SharedRegion>, String>;
    /// Map another rank's region `tag` of `len` bytes (after that rank created it).
    fn open(&self, tag: &str, len: usize) -> Result<Box<dyn SharedRegion>, String>;
}
