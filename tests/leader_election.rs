//! Leader election against a real kube-apiserver (the test bed, or the cluster in
//! COLOCATE_TEST_KUBECONFIG): two or three replicas of the elector on one Lease with a short lease
//! (3 s, renew every 1 s, step down after 2 s without a renew, retry every 0.5 s).
//!
//! A sampler reads every replica's leadership flag every 50 ms and counts the instants at which
//! more than one reported leadership: it must be zero, including while a partitioned leader loses
//! the API server and another replica takes over, and beside a follower whose wall clock runs an
//! hour ahead.

mod support;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use colocate::live::lease::{system_clock, Clock, LeaderElector, LeaseConfig};
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Api, Client};
use support::proxy::Proxy;
use support::testbed::Testbed;
use tokio::sync::{oneshot, watch};
use tokio::time::Instant;

const NS: &str = "default";
const LEASE_DURATION: Duration = Duration::from_secs(3);
const RENEW_INTERVAL: Duration = Duration::from_secs(1);
const RENEW_DEADLINE: Duration = Duration::from_secs(2);
const RETRY_PERIOD: Duration = Duration::from_millis(500);
/// Allowance for API round trips (a read and a write) and scheduling on a loaded CI machine, on
/// top of the protocol's own bounds. Only liveness bounds use it; safety checks use none.
const SLACK: Duration = Duration::from_millis(1500);
const SAMPLE_EVERY: Duration = Duration::from_millis(50);

async fn config(bed: &Testbed) -> kube::Config {
    let kubeconfig = Kubeconfig::read_from(&bed.kubeconfig).expect("readable kubeconfig");
    kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default()).await.expect("kubeconfig")
}

fn lease_config(lease: &str, identity: &str) -> LeaseConfig {
    LeaseConfig {
        name: lease.to_string(),
        namespace: NS.to_string(),
        identity: identity.to_string(),
        lease_duration: LEASE_DURATION,
        renew_interval: RENEW_INTERVAL,
        renew_deadline: RENEW_DEADLINE,
        retry_period: RETRY_PERIOD,
    }
}

/// A replica: its elector, its campaign task and the sender that shuts the campaign down.
struct Replica {
    name: &'static str,
    elector: Arc<LeaderElector>,
    task: tokio::task::JoinHandle<()>,
    shutdown: Option<oneshot::Sender<()>>,
}

fn spawn_replica(client: Client, lease: &str, name: &'static str, sampler: &Sampler) -> Replica {
    spawn_replica_with_clock(client, lease, name, sampler, system_clock())
}

/// A replica whose wall clock (for `renewTime` and `acquireTime`) is `clock`.
fn spawn_replica_with_clock(
    client: Client,
    lease: &str,
    name: &'static str,
    sampler: &Sampler,
    clock: Clock,
) -> Replica {
    let elector = LeaderElector::new(Api::namespaced(client, NS), lease_config(lease, name)).unwrap().with_clock(clock);
    let elector = Arc::new(elector);
    sampler.watch(name, elector.subscribe());
    let (tx, rx) = oneshot::channel::<()>();
    let e = elector.clone();
    let task = tokio::spawn(async move {
        e.run(async move {
            let _ = rx.await;
        })
        .await
    });
    Replica { name, elector, task, shutdown: Some(tx) }
}

/// A replica's name and leadership flag.
type Flag = (&'static str, watch::Receiver<bool>);
/// When, and which replicas reported leadership.
type Sample = (Instant, Vec<&'static str>);

/// Samples every watched flag at the same instant, every 50 ms.
#[derive(Clone, Default)]
struct Sampler {
    flags: Arc<Mutex<Vec<Flag>>>,
    samples: Arc<AtomicUsize>,
    both: Arc<Mutex<Vec<Vec<&'static str>>>>,
    /// Per sample: the replicas reporting leadership (for ordering checks).
    history: Arc<Mutex<Vec<Sample>>>,
}

impl Sampler {
    fn start() -> (Sampler, tokio::task::JoinHandle<()>) {
        let s = Sampler::default();
        let s2 = s.clone();
        let task = tokio::spawn(async move {
            let mut tick = tokio::time::interval(SAMPLE_EVERY);
            loop {
                tick.tick().await;
                let leaders: Vec<&'static str> =
                    s2.flags.lock().unwrap().iter().filter(|(_, rx)| *rx.borrow()).map(|(n, _)| *n).collect();
                s2.samples.fetch_add(1, Ordering::SeqCst);
                if leaders.len() > 1 {
                    s2.both.lock().unwrap().push(leaders.clone());
                }
                s2.history.lock().unwrap().push((Instant::now(), leaders));
            }
        });
        (s, task)
    }

    fn watch(&self, name: &'static str, rx: watch::Receiver<bool>) {
        self.flags.lock().unwrap().push((name, rx));
    }

    fn leaders_now(&self) -> Vec<&'static str> {
        self.flags.lock().unwrap().iter().filter(|(_, rx)| *rx.borrow()).map(|(n, _)| *n).collect()
    }

    /// Checks every 50 ms for `long` that `leader`, and no other replica, leads.
    async fn assert_sole_leader_for(&self, leader: &'static str, long: Duration, why: &str) {
        let until = Instant::now() + long;
        while Instant::now() < until {
            assert_eq!(self.leaders_now(), vec![leader], "leadership must stay with {leader}: {why}");
            tokio::time::sleep(SAMPLE_EVERY).await;
        }
    }

    #[track_caller]
    fn assert_never_two(&self, min_samples: usize) {
        let n = self.samples.load(Ordering::SeqCst);
        assert!(
            n >= min_samples,
            "only {n} samples taken (expected at least {min_samples}): the check would be vacuous"
        );
        let both = self.both.lock().unwrap();
        assert!(both.is_empty(), "{} of {n} samples had several leaders: {:?}", both.len(), &both[..both.len().min(5)]);
    }
}

/// Polls (every 20 ms) until exactly one of `candidates` leads; returns its name and the time it
/// took. Panics after `limit`.
async fn wait_for_leader(sampler: &Sampler, candidates: &[&'static str], limit: Duration, what: &str) -> &'static str {
    let t0 = Instant::now();
    loop {
        let leaders: Vec<_> = sampler.leaders_now().into_iter().filter(|n| candidates.contains(n)).collect();
        if leaders.len() == 1 {
            return leaders[0];
        }
        assert!(leaders.len() <= 1, "{what}: several leaders at once: {leaders:?}");
        assert!(t0.elapsed() < limit, "{what}: none of {candidates:?} leads after {limit:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn read_lease(api: &Api<Lease>, name: &str) -> LeaseSpec {
    api.get(name).await.expect("lease readable").spec.expect("lease has a spec")
}

fn holder(spec: &LeaseSpec) -> Option<&str> {
    spec.holder_identity.as_deref()
}

fn plus(t: Timestamp, d: Duration) -> Timestamp {
    t.checked_add(SignedDuration::try_from(d).unwrap()).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_leader_kill_takeover_and_graceful_release() {
    let bed = tokio::task::spawn_blocking(Testbed::start).await.unwrap();
    let client = Client::try_from(config(&bed).await).expect("client");
    let lease_name = "colocate-le-kill";
    let leases: Api<Lease> = Api::namespaced(client.clone(), NS);
    let (sampler, sampler_task) = Sampler::start();

    // Two replicas race for a Lease that does not exist yet: exactly one creates it.
    let mut replicas = vec![
        spawn_replica(client.clone(), lease_name, "a", &sampler),
        spawn_replica(client.clone(), lease_name, "b", &sampler),
    ];
    let first = wait_for_leader(&sampler, &["a", "b"], Duration::from_secs(10), "initial election").await;
    let spec = read_lease(&leases, lease_name).await;
    assert_eq!(holder(&spec), Some(first), "the replica reporting leadership holds the Lease");
    assert_eq!(spec.lease_transitions, Some(0), "creation is not a transition");
    assert_eq!(spec.lease_duration_seconds, Some(3));

    // Stable for longer than a lease duration (3 renews): same leader, the other follows.
    sampler.assert_sole_leader_for(first, LEASE_DURATION + RENEW_INTERVAL, "it renews").await;
    let spec = read_lease(&leases, lease_name).await;
    assert_eq!(holder(&spec), Some(first));
    assert_eq!(spec.lease_transitions, Some(0), "renewals are not transitions");
    assert!(
        spec.renew_time.as_ref().unwrap().0 > spec.acquire_time.as_ref().unwrap().0,
        "the leader renewed (renewTime moved past acquireTime)"
    );

    // Kill the leader: abort its task, no release.
    let idx = replicas.iter().position(|r| r.name == first).unwrap();
    let killed = replicas.remove(idx);
    let follower = replicas[0].name;
    let killed_at = Instant::now();
    killed.task.abort();
    assert!(killed.task.await.unwrap_err().is_cancelled());
    assert!(!killed.elector.is_leader(), "an aborted campaign publishes false");
    let before = read_lease(&leases, lease_name).await;
    // (A renew in flight at the abort may still land after this read; it only moves renewTime
    // later, so the safety check below stays valid.)
    let last_renew = before.renew_time.as_ref().unwrap().0;
    if holder(&before) == Some(first) {
        let took_over =
            wait_for_leader(&sampler, &[follower], LEASE_DURATION + RENEW_INTERVAL + SLACK, "takeover after kill")
                .await;
        assert_eq!(took_over, follower);
    } else {
        panic!("lease no longer held by the killed leader right after the kill: {before:?}");
    }
    let takeover_after = killed_at.elapsed();
    let after = read_lease(&leases, lease_name).await;
    assert_eq!(holder(&after), Some(follower));
    assert_eq!(after.lease_transitions, Some(1), "a takeover counts one transition");
    let acquired = after.acquire_time.as_ref().unwrap().0;
    assert!(
        acquired > plus(last_renew, LEASE_DURATION),
        "taken over at {acquired}, before the killed leader's lease expired ({last_renew} + 3s)"
    );
    eprintln!("takeover after kill: {takeover_after:?} (bound {:?} + slack)", LEASE_DURATION + RENEW_INTERVAL);

    // A third replica joins and follows.
    replicas.push(spawn_replica(client.clone(), lease_name, "c", &sampler));
    tokio::time::sleep(RENEW_INTERVAL + RETRY_PERIOD).await;
    assert_eq!(sampler.leaders_now(), vec![follower], "the newcomer follows");

    // Graceful shutdown of the leader: campaign ends (flag false), then release.
    let mut leader = replicas.remove(0);
    assert_eq!(leader.name, follower);
    leader.shutdown.take().unwrap().send(()).unwrap();
    leader.task.await.unwrap();
    assert!(!leader.elector.is_leader(), "run() publishes false before returning");
    let held = read_lease(&leases, lease_name).await;
    assert_eq!(holder(&held), Some(follower), "run() alone does not release");
    let last_renew = held.renew_time.as_ref().unwrap().0;
    let released_at = Instant::now();
    assert!(leader.elector.release().await.unwrap(), "the holder releases");
    let next = wait_for_leader(&sampler, &["c"], RETRY_PERIOD + SLACK, "takeover after release").await;
    let release_takeover = released_at.elapsed();
    let after = read_lease(&leases, lease_name).await;
    assert_eq!((next, holder(&after)), ("c", Some("c")));
    assert_eq!(after.lease_transitions, Some(2));
    let acquired = after.acquire_time.as_ref().unwrap().0;
    assert!(
        acquired < plus(last_renew, LEASE_DURATION),
        "c took over at {acquired}, not before the lease would have expired anyway ({last_renew} + 3s): \
         the release had no effect"
    );
    eprintln!("takeover after release: {release_takeover:?}");

    // Releasing a Lease one no longer holds changes nothing.
    assert!(!leader.elector.release().await.unwrap());
    assert_eq!(holder(&read_lease(&leases, lease_name).await), Some("c"));

    sampler_task.abort();
    // From the start: initial election, 4 s stable, kill takeover, 1.5 s, release takeover.
    sampler.assert_never_two(100);
    for r in replicas {
        r.task.abort();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn partitioned_leader_steps_down_before_the_follower_takes_over() {
    let bed = tokio::task::spawn_blocking(Testbed::start).await.unwrap();
    let direct = config(&bed).await;
    let upstream: SocketAddr = {
        let a = direct.cluster_url.authority().expect("cluster url has a host");
        format!("{}:{}", a.host(), a.port_u16().unwrap_or(443)).parse().expect("API server on an IP address")
    };
    let proxy = Proxy::start(upstream);
    let mut via_proxy = direct.clone();
    via_proxy.cluster_url = format!("https://{}", proxy.addr).parse().unwrap();
    let client_a = Client::try_from(via_proxy).expect("client via proxy");
    let client_b = Client::try_from(direct).expect("client");
    let lease_name = "colocate-le-partition";
    let leases: Api<Lease> = Api::namespaced(client_b.clone(), NS);
    let (sampler, sampler_task) = Sampler::start();

    // a leads first (b starts once it does).
    let a = spawn_replica(client_a, lease_name, "a", &sampler);
    assert_eq!(wait_for_leader(&sampler, &["a"], Duration::from_secs(10), "a alone").await, "a");
    let b = spawn_replica(client_b, lease_name, "b", &sampler);
    tokio::time::sleep(RENEW_INTERVAL * 2).await;
    assert_eq!(sampler.leaders_now(), vec!["a"]);

    // Partition a from the API server. Its process keeps running and would keep acting if it
    // trusted its flag without the renew deadline.
    let cut_at = Instant::now();
    proxy.cut();
    let last_renew = read_lease(&leases, lease_name).await.renew_time.unwrap().0;
    assert_eq!(
        wait_for_leader(&sampler, &["b"], RENEW_DEADLINE + LEASE_DURATION + RETRY_PERIOD + SLACK, "takeover").await,
        "b"
    );
    let after = read_lease(&leases, lease_name).await;
    assert_eq!(holder(&after), Some("b"));
    assert_eq!(after.lease_transitions, Some(1));
    assert!(after.acquire_time.unwrap().0 > plus(last_renew, LEASE_DURATION));

    // Ordering from the samples: a's last "leader" sample comes before b's first, with at least
    // one sample in between where nobody led.
    // Let the sampler see b lead; on a loaded machine its task may run late, so wait for it
    // (bounded) rather than for a fixed time.
    let seen_by = Instant::now() + Duration::from_secs(10);
    while !sampler.history.lock().unwrap().iter().any(|(t, l)| *t >= cut_at && l.contains(&"b")) {
        assert!(Instant::now() < seen_by, "the sampler never saw b lead although the Lease names b");
        tokio::time::sleep(SAMPLE_EVERY).await;
    }
    let history = sampler.history.lock().unwrap().clone();
    let after_cut: Vec<_> = history.iter().filter(|(t, _)| *t >= cut_at).collect();
    let a_last = after_cut.iter().rposition(|(_, l)| l.contains(&"a")).expect("a led when cut");
    let b_first = after_cut.iter().position(|(_, l)| l.contains(&"b")).expect("b leads");
    assert!(a_last < b_first, "a still led (sample {a_last}) after b took over (sample {b_first})");
    let gap = after_cut[b_first].0 - after_cut[a_last].0;
    eprintln!(
        "partition: a stepped down {:?} after the cut, b took over {:?} after the cut (gap {gap:?})",
        after_cut[a_last + 1].0 - cut_at,
        after_cut[b_first].0 - cut_at
    );
    // Its last renew was before the cut, so its Lease may expire from cut + 3 s on: a must have
    // stepped down before then (by its own timer, after 2 s; sampling adds up to 50 ms).
    assert!(
        after_cut[a_last + 1].0 - cut_at < LEASE_DURATION,
        "a stepped down only when its Lease could already have expired"
    );

    // a stays a follower while cut off and after the partition heals.
    tokio::time::sleep(RENEW_INTERVAL).await;
    proxy.heal();
    tokio::time::sleep(LEASE_DURATION).await;
    assert_eq!(sampler.leaders_now(), vec!["b"]);
    assert_eq!(holder(&read_lease(&leases, lease_name).await), Some("b"));

    sampler_task.abort();
    sampler.assert_never_two(100);
    a.task.abort();
    b.task.abort();
}

/// Wall clocks do not decide expiry: a follower whose wall clock runs an hour ahead (a skewed
/// node, or a clock stepped after the machine was paused) reads the leader's `renewTime` as an
/// hour old, and must still follow while the leader renews. It takes over once the leader is gone
/// and the Lease has stayed unchanged for a lease duration.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follower_whose_wall_clock_runs_an_hour_ahead_follows_a_live_leader() {
    let bed = tokio::task::spawn_blocking(Testbed::start).await.unwrap();
    let client = Client::try_from(config(&bed).await).expect("client");
    let lease_name = "colocate-le-skew";
    let leases: Api<Lease> = Api::namespaced(client.clone(), NS);
    let (sampler, sampler_task) = Sampler::start();

    let a = spawn_replica(client.clone(), lease_name, "a", &sampler);
    assert_eq!(wait_for_leader(&sampler, &["a"], Duration::from_secs(10), "a alone").await, "a");
    let an_hour_ahead: Clock = Arc::new(|| Timestamp::now().checked_add(SignedDuration::from_hours(1)).unwrap());
    let b = spawn_replica_with_clock(client, lease_name, "b", &sampler, an_hour_ahead);
    // Three lease durations: b reads the Lease at every retry, every read an hour "old".
    sampler.assert_sole_leader_for("a", LEASE_DURATION * 3, "it renews: b must follow").await;
    let spec = read_lease(&leases, lease_name).await;
    assert_eq!((holder(&spec), spec.lease_transitions), (Some("a"), Some(0)));

    // The leader dies; b takes over once the Lease has stayed unchanged for a lease duration.
    let killed_at = Instant::now();
    a.task.abort();
    let limit = LEASE_DURATION + RENEW_INTERVAL + RETRY_PERIOD + SLACK;
    assert_eq!(wait_for_leader(&sampler, &["b"], limit, "takeover by the follower an hour ahead").await, "b");
    let takeover = killed_at.elapsed();
    assert!(takeover >= LEASE_DURATION - RENEW_INTERVAL, "b took over {takeover:?} after the kill");
    let spec = read_lease(&leases, lease_name).await;
    assert_eq!((holder(&spec), spec.lease_transitions), (Some("b"), Some(1)));
    eprintln!("the follower an hour ahead took over {takeover:?} after the leader was killed");

    sampler_task.abort();
    sampler.assert_never_two(60);
    b.task.abort();
}
