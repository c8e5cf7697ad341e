//! The global tier: Redis (or Valkey), shared by hosts. Every operation is
//! one command or one script, so CAS, add and append are atomic in the
//! server; each is bounded by the time the invocation has left (connect,
//! read and write timeouts), and any failure is
//! [`StateError::Unavailable`] for the function, never a hung sandbox.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use luge_core::state::StateError;

use crate::Quotas;

/// Connections kept for reuse; more are opened under load and closed
/// after use.
const IDLE_CONNECTIONS: usize = 16;

/// Values above this are set by a transaction rather than a script (see
/// [`GlobalTier::set_large`]).
const LARGE_VALUE: usize = 64 << 10;

/// Longest a single Redis round trip may take even when the invocation has
/// more time: a slow server is reported, not waited on for minutes.
const MAX_ROUND_TRIP: Duration = Duration::from_secs(2);

/// Every write script starts with this: it keeps the namespace's usage
/// (hash KEYS[2]: `keys`, `bytes`) and refuses, with -4, a value over
/// ARGV[1] bytes or a namespace over ARGV[2] keys or ARGV[3] bytes: the
/// quotas hold at the global tier too, atomically with the write.
const PRELUDE: &str = r"
local maxv, maxk, maxb = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
-- Existence and length, without copying the value into Lua.
local exists = redis.call('EXISTS', KEYS[1]) == 1
local oldlen = exists and redis.call('STRLEN', KEYS[1]) or 0
local function allowed(newlen)
  if newlen > maxv then return false end
  if not exists and tonumber(redis.call('HGET', KEYS[2], 'keys') or '0') + 1 > maxk then return false end
  local db = newlen - oldlen
  if db > 0 and tonumber(redis.call('HGET', KEYS[2], 'bytes') or '0') + db > maxb then return false end
  return true
end
local function account(newlen)
  if not exists then redis.call('HINCRBY', KEYS[2], 'keys', 1) end
  if newlen ~= oldlen then redis.call('HINCRBY', KEYS[2], 'bytes', newlen - oldlen) end
end
local function put(new)
  if not allowed(#new) then return -4 end
  redis.call('SET', KEYS[1], new)
  account(#new)
  return 0
end
";

/// Sets KEYS[1] to ARGV[4]: 0, or -4.
const SET: &str = "return put(ARGV[4])";

/// Deletes KEYS[1]: 1, or 0 if absent.
const DELETE: &str = r"
if not exists then return 0 end
redis.call('DEL', KEYS[1])
redis.call('HINCRBY', KEYS[2], 'keys', -1)
redis.call('HINCRBY', KEYS[2], 'bytes', -oldlen)
return 1
";

/// Appends ARGV[4] (Redis's own APPEND: nothing copied into Lua): the new
/// length, or -4.
const APPEND: &str = r"
local newlen = oldlen + #ARGV[4]
if not allowed(newlen) then return -4 end
redis.call('APPEND', KEYS[1], ARGV[4])
account(newlen)
return newlen
";

/// Compare-and-set: ARGV[4] '1' and the old value ARGV[5], or '0' for
/// 'only if absent'; the new value ARGV[6]. 1 swapped, 0 not, or -4.
const CAS: &str = r"
if ARGV[4] == '0' then
  if exists then return 0 end
elseif not exists or oldlen ~= #ARGV[5] or redis.call('GET', KEYS[1]) ~= ARGV[5] then
  return 0
end
local r = put(ARGV[6])
if r ~= 0 then return r end
return 1
";

/// Adds the 8-byte little-endian ARGV[4] to the 8-byte counter KEYS[1]
/// (absent = 0), byte by byte with carry: exact two's-complement 64-bit
/// arithmetic, which Lua's doubles are not. The new value, false for a
/// value that is not a counter, or -4.
const ADD: &str = r"
local old = exists and redis.call('GET', KEYS[1]) or nil
if old and #old ~= 8 then return false end
local out, carry = {}, 0
for i = 1, 8 do
  local a = old and string.byte(old, i) or 0
  local s = a + string.byte(ARGV[4], i) + carry
  out[i] = string.char(s % 256)
  carry = math.floor(s / 256)
end
local v = table.concat(out)
local r = put(v)
if r ~= 0 then return r end
return v
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
    set: redis::Script,
    delete: redis::Script,
    cas: redis::Script,
    add: redis::Script,
    append: redis::Script,
    unlock: redis::Script,
    quotas: Quotas,
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
    pub fn new(url: &str, quotas: Quotas) -> Result<Self, crate::OpenError> {
        let client = redis::Client::open(url).map_err(|source| crate::OpenError::Url {
            url: url.to_owned(),
            source,
        })?;
        let script = |body: &str| redis::Script::new(&format!("{PRELUDE}{body}"));
        Ok(Self {
            client,
            idle: Mutex::default(),
            set: script(SET),
            delete: script(DELETE),
            cas: script(CAS),
            add: script(ADD),
            append: script(APPEND),
            unlock: redis::Script::new(UNLOCK),
            quotas,
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

    /// `script` on `key` (in namespace usage hash `usage`) with the quotas
    /// and `args`.
    fn write<T: redis::FromRedisValue>(
        &self,
        script: &redis::Script,
        key: &str,
        usage: &str,
        args: &[&[u8]],
        until: Instant,
    ) -> Result<T, StateError> {
        let q = &self.quotas;
        self.with(until, |c| {
            let mut invocation = script.key(key);
            invocation
                .key(usage)
                .arg(q.max_value_bytes)
                .arg(q.max_keys_per_namespace)
                .arg(q.max_bytes_per_namespace);
            for arg in args {
                invocation.arg(*arg);
            }
            invocation.invoke(c)
        })
    }

    pub fn set(
        &self,
        key: &str,
        usage: &str,
        value: &[u8],
        until: Instant,
    ) -> Result<(), StateError> {
        if value.len() > LARGE_VALUE {
            return self.set_large(key, usage, value, until);
        }
        match self.write::<i64>(&self.set, key, usage, &[value], until)? {
            0 => Ok(()),
            _ => Err(StateError::OverQuota),
        }
    }

    /// A set of a large value as an optimistic transaction: WATCH the key
    /// and the usage, read the old length and the usage, check the quotas
    /// here, then MULTI / SET / usage / EXEC, again if another client wrote
    /// in between. Two round trips, but the value is not copied into Lua
    /// (which costs a 1 MiB set 3.7x a plain SET).
    fn set_large(
        &self,
        key: &str,
        usage: &str,
        value: &[u8],
        until: Instant,
    ) -> Result<(), StateError> {
        let q = self.quotas;
        if value.len() > q.max_value_bytes {
            return Err(StateError::OverQuota);
        }
        let new_len = value.len() as i64;
        self.with(until, |c| {
            // Bounded: each retry means another writer made progress.
            for _ in 0..16 {
                let (exists, old_len, (keys, bytes)): (bool, i64, (Option<i64>, Option<i64>)) =
                    redis::pipe()
                        .cmd("WATCH")
                        .arg(key)
                        .arg(usage)
                        .ignore()
                        .cmd("EXISTS")
                        .arg(key)
                        .cmd("STRLEN")
                        .arg(key)
                        .cmd("HMGET")
                        .arg(usage)
                        .arg("keys")
                        .arg("bytes")
                        .query(c)?;
                let (keys, bytes) = (keys.unwrap_or(0), bytes.unwrap_or(0));
                let grow = new_len - old_len;
                let over = (!exists && keys + 1 > q.max_keys_per_namespace as i64)
                    || (grow > 0 && bytes + grow > q.max_bytes_per_namespace as i64);
                if over {
                    redis::cmd("UNWATCH").query::<()>(c)?;
                    return Ok(Err(StateError::OverQuota));
                }
                // `None`: EXEC was aborted, a watched key changed.
                let done: Option<(i64,)> = redis::pipe()
                    .atomic()
                    .cmd("SET")
                    .arg(key)
                    .arg(value)
                    .ignore()
                    .cmd("HINCRBY")
                    .arg(usage)
                    .arg("keys")
                    .arg(i64::from(!exists))
                    .ignore()
                    .cmd("HINCRBY")
                    .arg(usage)
                    .arg("bytes")
                    .arg(grow)
                    .query(c)?;
                if done.is_some() {
                    return Ok(Ok(()));
                }
            }
            Ok(Err(StateError::Busy))
        })?
    }

    pub fn delete(&self, key: &str, usage: &str, until: Instant) -> Result<bool, StateError> {
        self.write::<i64>(&self.delete, key, usage, &[], until)
            .map(|n| n > 0)
    }

    pub fn append(
        &self,
        key: &str,
        usage: &str,
        value: &[u8],
        until: Instant,
    ) -> Result<u64, StateError> {
        let n: i64 = self.write(&self.append, key, usage, &[value], until)?;
        u64::try_from(n).map_err(|_| StateError::OverQuota)
    }

    pub fn cas(
        &self,
        key: &str,
        usage: &str,
        old: Option<&[u8]>,
        new: &[u8],
        until: Instant,
    ) -> Result<bool, StateError> {
        let (flag, old) = match old {
            Some(old) => (&b"1"[..], old),
            None => (&b"0"[..], &[][..]),
        };
        match self.write::<i64>(&self.cas, key, usage, &[flag, old, new], until)? {
            1 => Ok(true),
            0 => Ok(false),
            _ => Err(StateError::OverQuota),
        }
    }

    pub fn add(
        &self,
        key: &str,
        usage: &str,
        delta: i64,
        until: Instant,
    ) -> Result<i64, StateError> {
        let value: redis::Value =
            self.write(&self.add, key, usage, &[&delta.to_le_bytes()[..]], until)?;
        match value {
            redis::Value::BulkString(bytes) => bytes
                .as_slice()
                .try_into()
                .map(i64::from_le_bytes)
                .map_err(|_| StateError::BadArgument),
            redis::Value::Int(_) => Err(StateError::OverQuota),
            _ => Err(StateError::BadArgument),
        }
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

    /// One page of the keys of namespace `ns` (without its prefix): Redis's
    /// SCAN from `cursor`, `limit` a hint of how many keys it looks at.
    pub fn keys(
        &self,
        ns: &str,
        cursor: u64,
        limit: usize,
        until: Instant,
    ) -> Result<luge_core::state::KeyPage, StateError> {
        let prefix = format!("luge:{ns}/");
        // The namespace's name is matched as it is, not as a pattern.
        let mut pattern = String::with_capacity(prefix.len() + 8);
        for c in prefix.chars() {
            if matches!(c, '*' | '?' | '[' | ']' | '\\') {
                pattern.push('\\');
            }
            pattern.push(c);
        }
        pattern.push('*');
        let (next, keys): (u64, Vec<Vec<u8>>) = self.with(until, |c| {
            redis::cmd("SCAN")
                .arg(cursor)
                .arg("MATCH")
                .arg(&pattern)
                .arg("COUNT")
                .arg(limit)
                .query(c)
        })?;
        let keys = keys
            .iter()
            .filter_map(|key| key.strip_prefix(prefix.as_bytes()))
            .map(|rest| String::from_utf8_lossy(rest).into_owned())
            .collect();
        Ok((keys, (next != 0).then_some(next)))
    }

    pub fn unlock(&self, key: &str, token: &str, until: Instant) -> Result<(), StateError> {
        self.with(until, |c| self.unlock.key(key).arg(token).invoke::<i64>(c))
            .map(drop)
    }
}
