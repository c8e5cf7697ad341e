//! The global tier: Redis (or Valkey), shared by hosts. Every operation is
//! one command or one script, so CAS, add and append are atomic in the
//! server; each is bounded by the time the invocation has left (connect,
//! read and write timeouts), and any failure is
//! [`StateError::Unavailable`] for the function, never a hung sandbox.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use luge_core::state::StateError;

/// Connections kept for reuse; more are opened under load and closed
/// after use.
const IDLE_CONNECTIONS: usize = 16;

/// Longest a single Redis round trip may take even when the invocation has
/// more time: a slow server is reported, not waited on for minutes.
const MAX_ROUND_TRIP: Duration = Duration::from_secs(2);

/// Compare-and-set: ARGV[1] "1" + old, or "0" for "only if absent".
const CAS: &str = r"
local cur = redis.call('GET', KEYS[1])
if ARGV[1] == '0' then
  if cur then return 0 end
elseif cur ~= ARGV[2] then
  return 0
end
if tonumber(ARGV[4]) < #ARGV[3] then return -4 end
redis.call('SET', KEYS[1], ARGV[3])
return 1
";

/// Adds the 8-byte little-endian ARGV[1] to the 8-byte counter KEYS[1]
/// (absent = 0), byte by byte with carry: exact two's-complement 64-bit
/// arithmetic, which Lua's doubles are not.
const ADD: &str = r"
local cur = redis.call('GET', KEYS[1])
if cur and #cur ~= 8 then return false end
local out, carry = {}, 0
for i = 1, 8 do
  local a = cur and string.byte(cur, i) or 0
  local s = a + string.byte(ARGV[1], i) + carry
  out[i] = string.char(s % 256)
  carry = math.floor(s / 256)
end
local v = table.concat(out)
redis.call('SET', KEYS[1], v)
return v
";

/// Appends ARGV[1] unless the result would exceed ARGV[2] bytes (-4).
const APPEND: &str = r"
if redis.call('STRLEN', KEYS[1]) + #ARGV[1] > tonumber(ARGV[2]) then return -4 end
return redis.call('APPEND', KEYS[1], ARGV[1])
";

/// Deletes the lock KEYS[1] only if ARGV[1] (the holder's token) holds it.
const UNLOCK: &str = r"
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
";

/// A Redis server and a few open connections to it.
pub(crate) struct GlobalTier {
    client: redis::Client,
    idle: Mutex<Vec<redis::Connection>>,
    cas: redis::Script,
    add: redis::Script,
    append: redis::Script,
    unlock: redis::Script,
    /// Operations that failed because the server was down or slow.
    pub failures: AtomicU64,
}

impl std::fmt::Debug for GlobalTier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GlobalTier").finish_non_exhaustive()
    }
}

impl GlobalTier {
    /// A tier on `url` (`redis://host:port/db`); nothing is connected yet,
    /// so a server that is down at start is reported per operation.
    pub fn new(url: &str) -> Result<Self, String> {
        let client = redis::Client::open(url).map_err(|e| format!("--state-url {url}: {e}"))?;
        Ok(Self {
            client,
            idle: Mutex::default(),
            cas: redis::Script::new(CAS),
            add: redis::Script::new(ADD),
            append: redis::Script::new(APPEND),
            unlock: redis::Script::new(UNLOCK),
            failures: AtomicU64::new(0),
        })
    }

    /// Runs `f` on a connection whose timeouts end by `until`.
    fn with<T>(
        &self,
        until: Instant,
        f: impl FnOnce(&mut redis::Connection) -> redis::RedisResult<T>,
    ) -> Result<T, StateError> {
        let left = until
            .saturating_duration_since(Instant::now())
            .min(MAX_ROUND_TRIP);
        if left < Duration::from_millis(1) {
            return Err(StateError::Unavailable);
        }
        let pooled = self.idle.lock().unwrap_or_else(|e| e.into_inner()).pop();
        let mut connection = match pooled {
            Some(connection) => connection,
            None => self
                .client
                .get_connection_with_timeout(left)
                .map_err(|e| self.failed(&e))?,
        };
        let timeouts = connection
            .set_read_timeout(Some(left))
            .and_then(|()| connection.set_write_timeout(Some(left)));
        if let Err(e) = timeouts {
            return Err(self.failed(&e));
        }
        match f(&mut connection) {
            Ok(value) => {
                let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
                if idle.len() < IDLE_CONNECTIONS {
                    idle.push(connection);
                }
                Ok(value)
            }
            // A server-side script error is the caller's bad argument; the
            // connection is fine.
            Err(e)
                if e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::ResponseError) =>
            {
                Err(StateError::BadArgument)
            }
            // Anything else: the connection is dropped, never reused.
            Err(e) => Err(self.failed(&e)),
        }
    }

    fn failed(&self, e: &redis::RedisError) -> StateError {
        self.failures.fetch_add(1, Ordering::Relaxed);
        tracing::warn!(error = %e, "state: global tier unavailable");
        StateError::Unavailable
    }

    pub fn get(&self, key: &str, until: Instant) -> Result<Option<Vec<u8>>, StateError> {
        self.with(until, |c| redis::cmd("GET").arg(key).query(c))
    }

    pub fn set(&self, key: &str, value: &[u8], until: Instant) -> Result<(), StateError> {
        self.with(until, |c| redis::cmd("SET").arg(key).arg(value).query(c))
    }

    pub fn delete(&self, key: &str, until: Instant) -> Result<bool, StateError> {
        self.with(until, |c| redis::cmd("DEL").arg(key).query::<i64>(c))
            .map(|n| n > 0)
    }

    pub fn append(
        &self,
        key: &str,
        value: &[u8],
        max: usize,
        until: Instant,
    ) -> Result<u64, StateError> {
        let n: i64 = self.with(until, |c| {
            self.append.key(key).arg(value).arg(max).invoke(c)
        })?;
        u64::try_from(n).map_err(|_| StateError::OverQuota)
    }

    pub fn cas(
        &self,
        key: &str,
        old: Option<&[u8]>,
        new: &[u8],
        max: usize,
        until: Instant,
    ) -> Result<bool, StateError> {
        let (flag, old) = match old {
            Some(old) => ("1", old),
            None => ("0", &[][..]),
        };
        let n: i64 = self.with(until, |c| {
            self.cas
                .key(key)
                .arg(flag)
                .arg(old)
                .arg(new)
                .arg(max)
                .invoke(c)
        })?;
        match n {
            1 => Ok(true),
            0 => Ok(false),
            _ => Err(StateError::OverQuota),
        }
    }

    pub fn add(&self, key: &str, delta: i64, until: Instant) -> Result<i64, StateError> {
        let value: Option<Vec<u8>> = self.with(until, |c| {
            self.add.key(key).arg(&delta.to_le_bytes()[..]).invoke(c)
        })?;
        let bytes: [u8; 8] = value
            .as_deref()
            .and_then(|v| v.try_into().ok())
            .ok_or(StateError::BadArgument)?;
        Ok(i64::from_le_bytes(bytes))
    }

    /// Takes `key` for `lease` with `token` if free.
    pub fn try_lock(
        &self,
        key: &str,
        token: &str,
        lease: Duration,
        until: Instant,
    ) -> Result<bool, StateError> {
        let ms = u64::try_from(lease.as_millis()).unwrap_or(u64::MAX).max(1);
        let reply: Option<String> = self.with(until, |c| {
            redis::cmd("SET")
                .arg(key)
                .arg(token)
                .arg("NX")
                .arg("PX")
                .arg(ms)
                .query(c)
        })?;
        Ok(reply.is_some())
    }

    pub fn unlock(&self, key: &str, token: &str, until: Instant) -> Result<(), StateError> {
        self.with(until, |c| self.unlock.key(key).arg(token).invoke::<i64>(c))
            .map(drop)
    }
}
