//! Leader election over a `coordination.k8s.io/v1` Lease, so that of several controller replicas
//! only one acts (sends commands to masters) while the others keep their caches warm and take over
//! when the leader dies or shuts down.
//!
//! # Protocol
//!
//! Every attempt reads the Lease and [`decide`]s (a pure function of the Lease, our identity and
//! how long we have seen it unchanged):
//! - no Lease: create it, holding it;
//! - held by us: renew (`renewTime = now`);
//! - free (no `holderIdentity`, e.g. released) or expired (its `resourceVersion` unchanged for
//!   longer than its `leaseDurationSeconds` on our monotonic clock, as client-go's leader election
//!   judges it): take it over, `leaseTransitions + 1`, `acquireTime = renewTime = now`;
//! - otherwise follow and retry after `retry_period`.
//!
//! Every write is a create or a `replace` carrying the `resourceVersion` that was read, so the API
//! server applies it only if nobody wrote the Lease in between: a 409 (Conflict, or AlreadyExists
//! on create) means another replica won, and we follow. Nothing is ever overwritten blindly.
//!
//! # Safety: never two leaders
//!
//! Leadership is published on a [`watch`] channel ([`LeaderElector::subscribe`]); every write
//! the controller makes (scale commands, forced deletions, Events, annotations) reads it at the
//! moment the write goes out, through `controller::gate::WriteGate`. A write that made us the holder was built at
//! instant `t` (taken *before* reading the clock for `renewTime`), so the Lease cannot expire for
//! the other replicas before `renewTime + lease_duration >= t + lease_duration`. We publish `true`
//! only until `t + renew_deadline` (`renew_deadline < lease_duration`) unless a later renew
//! succeeds: a leader that cannot reach the API server (partition, hung request, slow process)
//! publishes `false` by its own timer, independent of any request completing, at least
//! `lease_duration - renew_deadline` before anyone else may take over.
//!
//! Clocks: a follower judges expiry by its own monotonic clock, from the moment it first read the
//! Lease as the leader's last write left it; that read came after the write, so after `t`, and
//! the follower takes over no earlier than `t + lease_duration`. Wall clocks do not enter: not the
//! skew between replicas, nor a step of one (NTP, a virtual machine resumed after a pause; one CI
//! run saw the wall clock jump 21 s, which would have let a follower that compared `renewTime`
//! with its own wall clock take a live leader's Lease). `renewTime` and `acquireTime` are written
//! for people and tools. The guarantee holds as long as the replicas' clocks run at about the
//! same rate and a write ends within `lease_duration - renew_deadline` of reading `true` (the gate
//! abandons one that would not). A replica that starts beside a Lease a crashed holder left waits
//! a lease duration from its first read before taking it over.
//!
//! # Liveness
//!
//! - Killed leader (no release): a follower takes over at the latest `lease_duration +
//!   retry_period` (plus one request) after the leader's last successful renew.
//! - Graceful shutdown: [`LeaderElector::run`] returns when its shutdown future resolves, having
//!   published `false`; after the in-flight commands are finished or abandoned, call
//!   [`LeaderElector::release`], which clears `holderIdentity`, and a follower takes over within
//!   one `retry_period`.
//! - If the future of [`LeaderElector::run`] is dropped (its task aborted), `false` is published
//!   too; the Lease is left to expire.

use std::future::Future;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::api::PostParams;
use kube::Api;
use tokio::sync::watch;
use tokio::time::Instant;

use crate::live::names::object_key;

/// Wall clock used for `renewTime`/`acquireTime` (injectable for tests).
pub type Clock = Arc<dyn Fn() -> Timestamp + Send + Sync>;

/// The system wall clock.
pub fn system_clock() -> Clock {
    Arc::new(Timestamp::now)
}

/// Timing and identity of an elector. See the module docs for how the durations relate.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeaseConfig {
    /// Name of the Lease object.
    pub name: String,
    /// Namespace of the Lease object.
    pub namespace: String,
    /// Unique per replica (e.g. the pod name); [`default_identity`] if unsure.
    pub identity: String,
    /// How long a Lease stays valid after its last renew (`leaseDurationSeconds`, whole seconds,
    /// rounded up). Default 15 s.
    pub lease_duration: Duration,
    /// How often the leader renews. Default `lease_duration / 3`.
    pub renew_interval: Duration,
    /// The leader steps down if no renew succeeded for this long. Must be below
    /// `lease_duration` (the margin covers clock skew) and above `renew_interval`. Default
    /// `lease_duration * 2 / 3`.
    pub renew_deadline: Duration,
    /// How often a follower (or a leader whose renew failed) retries. Default 2 s (capped at
    /// `renew_interval`).
    pub retry_period: Duration,
}

impl LeaseConfig {
    /// Defaults (15 s lease, renew every 5 s, deadline 10 s, retry every 2 s).
    pub fn new(namespace: impl Into<String>, name: impl Into<String>, identity: impl Into<String>) -> LeaseConfig {
        LeaseConfig::with_duration(namespace, name, identity, Duration::from_secs(15))
    }

    /// `lease_duration` and the durations derived from it: renew every third, deadline two
    /// thirds, retry every 2 s or every renew interval if that is shorter.
    pub fn with_duration(
        namespace: impl Into<String>,
        name: impl Into<String>,
        identity: impl Into<String>,
        lease_duration: Duration,
    ) -> LeaseConfig {
        let renew_interval = lease_duration / 3;
        LeaseConfig {
            name: name.into(),
            namespace: namespace.into(),
            identity: identity.into(),
            lease_duration,
            renew_interval,
            renew_deadline: lease_duration * 2 / 3,
            retry_period: Duration::from_secs(2).min(renew_interval),
        }
    }

    /// Checks the relations the safety argument needs.
    pub fn validate(&self) -> Result<(), LeaseError> {
        let bad = |why: String| Err(LeaseError::Config(why));
        if self.identity.is_empty() {
            return bad("identity must not be empty".into());
        }
        if self.name.is_empty() || self.namespace.is_empty() {
            return bad("lease name and namespace must not be empty".into());
        }
        if self.lease_duration < Duration::from_secs(1) || self.lease_duration.as_secs() >= i32::MAX as u64 {
            return bad(format!("lease duration {:?} must be at least 1s", self.lease_duration));
        }
        if self.renew_deadline >= self.lease_duration {
            return bad(format!(
                "renew deadline {:?} must be shorter than the lease duration {:?}",
                self.renew_deadline, self.lease_duration
            ));
        }
        if self.renew_interval.is_zero() || self.renew_interval >= self.renew_deadline {
            return bad(format!(
                "renew interval {:?} must be positive and shorter than the renew deadline {:?}",
                self.renew_interval, self.renew_deadline
            ));
        }
        if self.retry_period.is_zero() {
            return bad("retry period must be positive".into());
        }
        Ok(())
    }

    /// `leaseDurationSeconds` as written: the duration rounded up to whole seconds, so that the
    /// Lease never expires earlier than `lease_duration`.
    pub fn lease_duration_seconds(&self) -> i32 {
        let d = self.lease_duration;
        let secs = d.as_secs() + u64::from(d.subsec_nanos() > 0);
        i32::try_from(secs).unwrap_or(i32::MAX)
    }
}

/// `$POD_NAME`, else `$HOSTNAME`, else `colocate`; followed by `-` and a random suffix, so that
/// two processes on one host (or a restarted pod) never share an identity.
pub fn default_identity() -> String {
    let base = std::env::var("POD_NAME")
        .or_else(|_| std::env::var("HOSTNAME"))
        .ok()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "colocate".to_string());
    let nanos = Timestamp::now().as_nanosecond() as u64;
    let mixed = (nanos ^ (u64::from(std::process::id()) << 32)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    format!("{base}-{:08x}", mixed >> 32)
}

#[derive(Debug, thiserror::Error)]
pub enum LeaseError {
    #[error("invalid leader election config: {0}")]
    Config(String),
    #[error("lease {0}: {1}")]
    Api(String, #[source] kube::Error),
    #[error("lease {0}: request timed out after {1:?}")]
    Timeout(String, Duration),
}

/// What to do with the Lease as read (pure; see [`decide`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    /// No Lease exists: create it.
    Create,
    /// We hold it: renew it.
    Renew,
    /// Free or expired: take it over (`leaseTransitions + 1`).
    TakeOver {
        /// The holder whose Lease expired (`None`: released or never held).
        previous: Option<String>,
    },
    /// Another replica holds an unexpired Lease.
    Follow {
        holder: String,
        /// How much longer it must stay unchanged before it expires.
        expires_in: Duration,
    },
}

/// Decides from the Lease as read (`None`: it does not exist), our identity and how long we have
/// seen this very version of it (on our monotonic clock). A held Lease expires only once it has
/// stayed unchanged for strictly longer than its `leaseDurationSeconds` (`fallback` if it has
/// none).
pub fn decide(
    lease: Option<&LeaseSpec>,
    me: &str,
    unchanged_for: Duration,
    fallback_duration_seconds: i32,
) -> Decision {
    let Some(spec) = lease else { return Decision::Create };
    let holder = spec.holder_identity.as_deref().filter(|h| !h.is_empty());
    match holder {
        None => Decision::TakeOver { previous: None },
        Some(h) if h == me => Decision::Renew,
        Some(h) => {
            let secs = spec.lease_duration_seconds.unwrap_or(fallback_duration_seconds).max(0);
            let duration = Duration::from_secs(secs.unsigned_abs().into());
            if unchanged_for > duration {
                Decision::TakeOver { previous: Some(h.to_string()) }
            } else {
                Decision::Follow { holder: h.to_string(), expires_in: duration - unchanged_for }
            }
        }
    }
}

/// The spec to write for `decision` (`None` for [`Decision::Follow`]).
pub fn next_spec(
    current: Option<&LeaseSpec>,
    decision: &Decision,
    me: &str,
    now: Timestamp,
    duration_seconds: i32,
) -> Option<LeaseSpec> {
    let base = current.cloned().unwrap_or_default();
    let held = |acquired: Timestamp, transitions: i32| LeaseSpec {
        holder_identity: Some(me.to_string()),
        lease_duration_seconds: Some(duration_seconds),
        acquire_time: Some(MicroTime(acquired)),
        renew_time: Some(MicroTime(now)),
        lease_transitions: Some(transitions),
        ..base.clone()
    };
    match decision {
        Decision::Follow { .. } => None,
        Decision::Create => Some(held(now, 0)),
        Decision::Renew => {
            let acquired = base.acquire_time.as_ref().map_or(now, |t| t.0);
            Some(held(acquired, base.lease_transitions.unwrap_or(0)))
        }
        Decision::TakeOver { .. } => Some(held(now, base.lease_transitions.unwrap_or(0).saturating_add(1))),
    }
}

/// The result of one attempt against the API server.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Attempt {
    /// We hold the Lease (created, renewed or taken over by this write).
    Holding,
    /// Another replica holds it (or won the race for it).
    Following { holder: Option<String> },
}

/// Campaigns for and holds one Lease; see the module docs.
pub struct LeaderElector {
    api: Api<Lease>,
    config: LeaseConfig,
    clock: Clock,
    leader: watch::Sender<bool>,
    /// The Lease's `resourceVersion` as last read, and when it was first read so.
    observed: Mutex<Option<(String, Instant)>>,
}

impl LeaderElector {
    /// `api` must be namespaced to `config.namespace` (e.g. `Api::namespaced(client, ns)`).
    pub fn new(api: Api<Lease>, config: LeaseConfig) -> Result<LeaderElector, LeaseError> {
        config.validate()?;
        Ok(LeaderElector {
            api,
            config,
            clock: system_clock(),
            leader: watch::channel(false).0,
            observed: Mutex::new(None),
        })
    }

    /// Replaces the wall clock (tests).
    pub fn with_clock(mut self, clock: Clock) -> LeaderElector {
        self.clock = clock;
        self
    }

    pub fn config(&self) -> &LeaseConfig {
        &self.config
    }

    /// Leadership: `true` only while acting is safe. Starts `false`.
    pub fn subscribe(&self) -> watch::Receiver<bool> {
        self.leader.subscribe()
    }

    pub fn is_leader(&self) -> bool {
        *self.leader.borrow()
    }

    fn publish(&self, leading: bool) {
        self.leader.send_if_modified(|v| {
            let changed = *v != leading;
            *v = leading;
            changed
        });
    }

    fn step_down(&self, deadline: &mut Option<Instant>, why: &str) {
        if deadline.take().is_some() || self.is_leader() {
            tracing::warn!(identity = %self.config.identity, lease = %self.config.name, "stepping down: {why}");
        }
        self.publish(false);
    }

    /// Campaigns until `shutdown` resolves, then publishes `false` and returns (without releasing
    /// the Lease: finish or abandon the in-flight commands first, then call
    /// [`release`](Self::release)). API errors are logged and retried; they never end the loop.
    /// Run one campaign per elector at a time.
    pub async fn run(&self, shutdown: impl Future<Output = ()>) {
        let _guard = StepDownOnDrop(&self.leader);
        let mut shutdown = std::pin::pin!(shutdown);
        // While leading: the instant after which we must no longer act unless a renew succeeds.
        let mut deadline: Option<Instant> = None;
        // The holder we last said we follow: logged once per change, not at every retry.
        let mut following: Option<Option<String>> = None;
        let cfg = &self.config;
        loop {
            let started = Instant::now();
            let attempt = tokio::select! {
                biased;
                () = &mut shutdown => break,
                r = self.guarded(self.try_acquire_or_renew(), &mut deadline) => r,
            };
            let next = match attempt {
                Ok(Attempt::Holding) => {
                    let until = started + cfg.renew_deadline;
                    if Instant::now() < until {
                        if deadline.is_none() {
                            tracing::info!(identity = %cfg.identity, lease = %cfg.name, "became leader");
                        }
                        following = None;
                        deadline = Some(until);
                        self.publish(true);
                    } else {
                        self.step_down(&mut deadline, "renew succeeded too late");
                    }
                    started + cfg.renew_interval
                }
                Ok(Attempt::Following { holder }) => {
                    let why = format!("lease held by {}", holder.as_deref().unwrap_or("<nobody>"));
                    self.step_down(&mut deadline, &why);
                    if following.as_ref() != Some(&holder) {
                        tracing::info!(identity = %cfg.identity, lease = %self.describe(),
                            "following: {why}; this replica watches and decides but writes nothing until it leads");
                        following = Some(holder);
                    }
                    started + cfg.retry_period
                }
                Err(e) => {
                    tracing::warn!(identity = %cfg.identity, "leader election attempt failed: {e}");
                    started + cfg.retry_period
                }
            };
            tokio::select! {
                biased;
                () = &mut shutdown => break,
                () = self.guarded(tokio::time::sleep_until(next), &mut deadline) => {}
            }
        }
        self.step_down(&mut deadline, "shutting down");
    }

    /// Runs `fut`, publishing `false` as soon as `deadline` passes (and clearing it) even if
    /// `fut` has not completed.
    async fn guarded<F: Future>(&self, fut: F, deadline: &mut Option<Instant>) -> F::Output {
        let mut fut = std::pin::pin!(fut);
        loop {
            let Some(d) = *deadline else { return fut.await };
            tokio::select! {
                biased;
                r = &mut fut => return r,
                () = tokio::time::sleep_until(d) => self.step_down(deadline, "renew deadline passed"),
            }
        }
    }

    fn describe(&self) -> String {
        object_key(&self.config.namespace, &self.config.name)
    }

    /// Bounds one request: at most the renew deadline.
    async fn request<T>(&self, fut: impl Future<Output = kube::Result<T>>) -> Result<kube::Result<T>, LeaseError> {
        tokio::time::timeout(self.config.renew_deadline, fut)
            .await
            .map_err(|_| LeaseError::Timeout(self.describe(), self.config.renew_deadline))
    }

    /// One read-decide-write round against the API server. Does not touch the leadership flag.
    pub async fn try_acquire_or_renew(&self) -> Result<Attempt, LeaseError> {
        let cfg = &self.config;
        let current =
            self.request(self.api.get_opt(&cfg.name)).await?.map_err(|e| LeaseError::Api(self.describe(), e))?;
        let unchanged_for = self.observe(current.as_ref().and_then(|l| l.metadata.resource_version.as_deref()));
        let now = (self.clock)();
        let secs = cfg.lease_duration_seconds();
        let spec = current.as_ref().map(|l| l.spec.clone().unwrap_or_default());
        let decision = decide(spec.as_ref(), &cfg.identity, unchanged_for, secs);
        let Some(new_spec) = next_spec(spec.as_ref(), &decision, &cfg.identity, now, secs) else {
            let Decision::Follow { holder, .. } = decision else { unreachable!("only Follow writes nothing") };
            return Ok(Attempt::Following { holder: Some(holder) });
        };
        if let Decision::TakeOver { previous } = &decision {
            tracing::info!(identity = %cfg.identity, previous = ?previous, "taking over lease {}", self.describe());
        }
        let pp = PostParams::default();
        let written = match current {
            None => {
                let lease = Lease {
                    metadata: ObjectMeta {
                        name: Some(cfg.name.clone()),
                        namespace: Some(cfg.namespace.clone()),
                        ..ObjectMeta::default()
                    },
                    spec: Some(new_spec),
                };
                self.request(self.api.create(&pp, &lease)).await?
            }
            Some(mut lease) => {
                // `lease.metadata.resource_version` is the version read: the API server rejects
                // the replace with 409 Conflict if anyone wrote the Lease since.
                lease.spec = Some(new_spec);
                self.request(self.api.replace(&cfg.name, &pp, &lease)).await?
            }
        };
        match written {
            Ok(_) => Ok(Attempt::Holding),
            Err(kube::Error::Api(status)) if status.code == 409 => Ok(Attempt::Following { holder: None }),
            Err(e) => Err(LeaseError::Api(self.describe(), e)),
        }
    }

    /// How long the Lease has been at `version` as far as our reads show (0 when it has just
    /// changed, or has no version).
    fn observe(&self, version: Option<&str>) -> Duration {
        let now = Instant::now();
        let mut observed = self.observed.lock().unwrap_or_else(PoisonError::into_inner);
        match (version, observed.as_ref()) {
            (Some(v), Some((seen, since))) if v == seen => now.duration_since(*since),
            (Some(v), _) => {
                *observed = Some((v.to_string(), now));
                Duration::ZERO
            }
            (None, _) => {
                *observed = None;
                Duration::ZERO
            }
        }
    }

    /// Gives the Lease up for a graceful shutdown: publishes `false`, then, if we hold it, clears
    /// `holderIdentity` (with the version read, so a Lease someone else took is never touched) so
    /// that a follower takes over at its next retry. Returns whether we released it. Call it
    /// after [`run`](Self::run) returned and the in-flight commands are finished or abandoned.
    pub async fn release(&self) -> Result<bool, LeaseError> {
        self.publish(false);
        let cfg = &self.config;
        let Some(mut lease) =
            self.request(self.api.get_opt(&cfg.name)).await?.map_err(|e| LeaseError::Api(self.describe(), e))?
        else {
            return Ok(false);
        };
        let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
        if spec.holder_identity.as_deref() != Some(cfg.identity.as_str()) {
            return Ok(false);
        }
        spec.holder_identity = None;
        spec.renew_time = Some(MicroTime((self.clock)()));
        match self.request(self.api.replace(&cfg.name, &PostParams::default(), &lease)).await? {
            Ok(_) => {
                tracing::info!(identity = %cfg.identity, "released lease {}", self.describe());
                Ok(true)
            }
            // Someone wrote it since we read it: not ours to release any more (or retry later).
            Err(kube::Error::Api(status)) if status.code == 409 => Ok(false),
            Err(e) => Err(LeaseError::Api(self.describe(), e)),
        }
    }
}

/// Publishes `false` when the campaign future is dropped (task aborted or finished).
struct StepDownOnDrop<'a>(&'a watch::Sender<bool>);

impl Drop for StepDownOnDrop<'_> {
    fn drop(&mut self) {
        self.0.send_replace(false);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ts(secs: i64) -> Timestamp {
        Timestamp::from_second(1_700_000_000 + secs).unwrap()
    }

    fn held(holder: &str, renewed: i64, duration: Option<i32>, transitions: i32) -> LeaseSpec {
        LeaseSpec {
            holder_identity: Some(holder.to_string()),
            lease_duration_seconds: duration,
            acquire_time: Some(MicroTime(ts(renewed - 100))),
            renew_time: Some(MicroTime(ts(renewed))),
            lease_transitions: Some(transitions),
            ..LeaseSpec::default()
        }
    }

    fn secs(s: u64) -> Duration {
        Duration::from_secs(s)
    }

    #[test]
    fn absent_lease_is_created_with_zero_transitions() {
        let d = decide(None, "a", Duration::ZERO, 15);
        assert_eq!(d, Decision::Create);
        let spec = next_spec(None, &d, "a", ts(0), 15).unwrap();
        assert_eq!(spec.holder_identity.as_deref(), Some("a"));
        assert_eq!(spec.lease_duration_seconds, Some(15));
        assert_eq!(spec.lease_transitions, Some(0));
        assert_eq!(spec.acquire_time, Some(MicroTime(ts(0))));
        assert_eq!(spec.renew_time, Some(MicroTime(ts(0))));
    }

    #[test]
    fn lease_held_by_other_is_followed_until_unchanged_for_strictly_longer_than_its_duration() {
        let spec = held("b", 0, Some(15), 3);
        for seen in [0, 10, 15] {
            assert_eq!(
                decide(Some(&spec), "a", secs(seen), 15),
                Decision::Follow { holder: "b".into(), expires_in: secs(15 - seen) },
                "unchanged for {seen} s"
            );
        }
        assert_eq!(decide(Some(&spec), "a", secs(16), 15), Decision::TakeOver { previous: Some("b".into()) });
        // One microsecond past the duration is enough.
        let just_after = secs(15) + Duration::from_micros(1);
        assert_eq!(decide(Some(&spec), "a", just_after, 15), Decision::TakeOver { previous: Some("b".into()) });
    }

    #[test]
    fn the_leases_renew_time_does_not_decide_expiry() {
        // Written by a clock far behind ours (or long ago, by a holder we have not watched): we
        // have not seen it unchanged for a lease duration, so its holder may still be renewing.
        let mut spec = held("b", -3_600, Some(15), 0);
        assert!(matches!(decide(Some(&spec), "a", secs(1), 15), Decision::Follow { .. }));
        spec.renew_time = None;
        assert!(matches!(decide(Some(&spec), "a", secs(1), 15), Decision::Follow { .. }));
        assert!(matches!(decide(Some(&spec), "a", secs(16), 15), Decision::TakeOver { .. }));
    }

    #[test]
    fn expiry_uses_the_leases_own_duration_not_ours() {
        // The holder wrote 60 s; our config says 15 s: still held after 30 s unchanged.
        let spec = held("b", 0, Some(60), 0);
        assert!(matches!(decide(Some(&spec), "a", secs(30), 15), Decision::Follow { .. }));
        assert!(matches!(decide(Some(&spec), "a", secs(61), 15), Decision::TakeOver { .. }));
        // Without a duration on the Lease, ours applies.
        let spec = held("b", 0, None, 0);
        assert!(matches!(decide(Some(&spec), "a", secs(15), 15), Decision::Follow { .. }));
        assert!(matches!(decide(Some(&spec), "a", secs(16), 15), Decision::TakeOver { .. }));
    }

    #[test]
    fn takeover_of_an_expired_lease_counts_a_transition_and_resets_acquire_time() {
        let spec = held("b", 0, Some(15), 3);
        let d = decide(Some(&spec), "a", secs(20), 15);
        let new = next_spec(Some(&spec), &d, "a", ts(20), 10).unwrap();
        assert_eq!(new.holder_identity.as_deref(), Some("a"));
        assert_eq!(new.lease_transitions, Some(4));
        assert_eq!(new.acquire_time, Some(MicroTime(ts(20))));
        assert_eq!(new.renew_time, Some(MicroTime(ts(20))));
        assert_eq!(new.lease_duration_seconds, Some(10));
    }

    #[test]
    fn released_lease_is_taken_over_at_once_and_counts_a_transition() {
        let mut spec = held("b", 0, Some(15), 2);
        spec.holder_identity = None;
        let d = decide(Some(&spec), "a", Duration::ZERO, 15);
        assert_eq!(d, Decision::TakeOver { previous: None });
        assert_eq!(next_spec(Some(&spec), &d, "a", ts(1), 15).unwrap().lease_transitions, Some(3));
        spec.holder_identity = Some(String::new());
        assert_eq!(decide(Some(&spec), "a", Duration::ZERO, 15), Decision::TakeOver { previous: None });
    }

    #[test]
    fn lease_held_by_self_is_renewed_without_a_transition_even_if_expired() {
        let spec = held("a", 0, Some(15), 5);
        for now in [1_i64, 100] {
            let d = decide(Some(&spec), "a", secs(now.unsigned_abs()), 15);
            assert_eq!(d, Decision::Renew);
            let new = next_spec(Some(&spec), &d, "a", ts(now), 15).unwrap();
            assert_eq!(new.lease_transitions, Some(5));
            assert_eq!(new.acquire_time, Some(MicroTime(ts(-100))), "acquireTime kept");
            assert_eq!(new.renew_time, Some(MicroTime(ts(now))));
        }
    }

    #[test]
    fn follow_writes_nothing() {
        let spec = held("b", 0, Some(15), 0);
        let d = decide(Some(&spec), "a", secs(1), 15);
        assert_eq!(next_spec(Some(&spec), &d, "a", ts(1), 15), None);
    }

    #[test]
    fn config_defaults_and_validation() {
        let c = LeaseConfig::new("ns", "colocate", "me");
        assert_eq!(c.lease_duration, Duration::from_secs(15));
        assert_eq!(c.renew_interval, Duration::from_secs(5));
        assert_eq!(c.renew_deadline, Duration::from_secs(10));
        assert_eq!(c.retry_period, Duration::from_secs(2));
        c.validate().unwrap();
        assert_eq!(c.lease_duration_seconds(), 15);

        let mut fractional = c.clone();
        fractional.lease_duration = Duration::from_millis(14_500);
        assert_eq!(fractional.lease_duration_seconds(), 15, "rounded up, never shorter");

        let mut bad = c.clone();
        bad.renew_deadline = bad.lease_duration;
        assert!(bad.validate().is_err());
        let mut bad = c.clone();
        bad.renew_interval = bad.renew_deadline;
        assert!(bad.validate().is_err());
        let mut bad = c.clone();
        bad.identity.clear();
        assert!(bad.validate().is_err());
        let mut bad = c;
        bad.retry_period = Duration::ZERO;
        assert!(bad.validate().is_err());
    }

    #[test]
    fn default_identities_differ() {
        let a = default_identity();
        std::thread::sleep(Duration::from_millis(2));
        let b = default_identity();
        assert_ne!(a, b);
        assert!(!a.is_empty());
    }
}
