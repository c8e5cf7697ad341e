//! A shared-state store in one map (both tiers), for the fuzz targets
//! that drive what reads and writes state: every operation answers as
//! Luge's tiers do, values bounded by [`MAX_VALUE`].

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use luge_core::state::{State, StateError, Tier};

/// The most one value holds (what `append` grows to).
pub const MAX_VALUE: usize = 64 << 10;

/// Both tiers in one map.
#[derive(Default)]
pub struct MapState(Mutex<HashMap<String, Vec<u8>>>);

impl MapState {
    fn map(&self) -> std::sync::MutexGuard<'_, HashMap<String, Vec<u8>>> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

impl State for MapState {
    fn get(&self, key: &str, _: Tier) -> Result<Arc<[u8]>, StateError> {
        self.map()
            .get(key)
            .map(|v| Arc::from(v.as_slice()))
            .ok_or(StateError::NotFound)
    }
    fn set(&self, key: &str, value: &[u8], _: Tier) -> Result<(), StateError> {
        self.map().insert(key.to_owned(), value.to_vec());
        Ok(())
    }
    fn delete(&self, key: &str, _: Tier) -> Result<(), StateError> {
        self.map().remove(key).map(drop).ok_or(StateError::NotFound)
    }
    fn append(&self, key: &str, value: &[u8], _: Tier) -> Result<u64, StateError> {
        let mut map = self.map();
        let entry = map.entry(key.to_owned()).or_default();
        if entry.len() + value.len() > MAX_VALUE {
            return Err(StateError::OverQuota);
        }
        entry.extend_from_slice(value);
        Ok(entry.len() as u64)
    }
    fn cas(&self, key: &str, old: Option<&[u8]>, new: &[u8], _: Tier) -> Result<bool, StateError> {
        let mut map = self.map();
        if map.get(key).map(Vec::as_slice) != old {
            return Ok(false);
        }
        map.insert(key.to_owned(), new.to_vec());
        Ok(true)
    }
    fn add(&self, key: &str, delta: i64, _: Tier) -> Result<i64, StateError> {
        let mut map = self.map();
        let old = match map.get(key) {
            None => 0,
            Some(v) => i64::from_le_bytes(
                v.as_slice()
                    .try_into()
                    .map_err(|_| StateError::BadArgument)?,
            ),
        };
        let new = old.wrapping_add(delta);
        map.insert(key.to_owned(), new.to_le_bytes().to_vec());
        Ok(new)
    }
    fn pull(&self, _: &str) -> Result<(), StateError> {
        Ok(())
    }
    fn push(&self, _: &str) -> Result<(), StateError> {
        Ok(())
    }
    fn try_lock(&self, _: &str, _: Duration) -> Result<bool, StateError> {
        Ok(true)
    }
    fn unlock(&self, _: &str) -> Result<(), StateError> {
        Ok(())
    }
    fn keys(
        &self,
        prefix: &str,
        _: Tier,
        cursor: u64,
        limit: usize,
    ) -> Result<luge_core::state::KeyPage, StateError> {
        let mut keys: Vec<String> = self
            .map()
            .keys()
            .filter_map(|key| key.strip_prefix(prefix).map(str::to_owned))
            .collect();
        keys.sort();
        Ok(luge_core::state::page(keys.iter(), cursor, limit))
    }
    fn wait_until(&self) -> Instant {
        Instant::now() + Duration::from_millis(10)
    }
}
