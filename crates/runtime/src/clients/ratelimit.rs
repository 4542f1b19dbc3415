//! Client-side QPS/burst limit, as client-go's token bucket (`--kube-api-qps`,
//! `--kube-api-burst`). kube 5's `Config` has no such setting, so it is a tower layer placed
//! under kube's retry layer: every attempt, retries included, takes a token.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use tokio::time::{Instant, Sleep};
use tower::{Layer, Service};

/// Requests per second and burst size; `qps <= 0` means unlimited.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RateLimit {
    pub qps: f64,
    pub burst: u32,
}

impl RateLimit {
    /// No limit, as kube-rs behaves by default.
    pub const UNLIMITED: RateLimit = RateLimit { qps: 0.0, burst: 0 };

    pub(crate) fn is_limited(&self) -> bool {
        self.qps > 0.0
    }
}

/// Token bucket: holds up to `burst` tokens, refilled at `qps` per second.
#[derive(Debug)]
struct TokenBucket {
    capacity: f64,
    per_second: f64,
    tokens: f64,
    refilled_at: Instant,
}

impl TokenBucket {
    fn new(limit: RateLimit, now: Instant) -> Self {
        // A burst of 0 would never admit a request; one token is the least that makes progress.
        let capacity = f64::from(limit.burst.max(1));
        Self {
            capacity,
            per_second: limit.qps,
            tokens: capacity,
            refilled_at: now,
        }
    }

    /// Takes a token, or says how long until one is available.
    fn take(&mut self, now: Instant) -> Result<(), Duration> {
        let elapsed = now
            .saturating_duration_since(self.refilled_at)
            .as_secs_f64();
        self.tokens = (self.tokens + elapsed * self.per_second).min(self.capacity);
        self.refilled_at = now;
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            Ok(())
        } else {
            Err(Duration::from_secs_f64(
                (1.0 - self.tokens) / self.per_second,
            ))
        }
    }
}

/// Layer adding [`RateLimited`] to kube's service stack.
#[derive(Debug, Clone, Copy)]
pub struct RateLimitLayer(RateLimit);

impl RateLimitLayer {
    pub fn new(limit: RateLimit) -> Self {
        Self(limit)
    }
}

impl<S> Layer<S> for RateLimitLayer {
    type Service = RateLimited<S>;

    fn layer(&self, inner: S) -> RateLimited<S> {
        RateLimited {
            inner,
            bucket: TokenBucket::new(self.0, Instant::now()),
            wait: None,
            has_token: false,
        }
    }
}

/// Waits in `poll_ready` until the bucket has a token. It sits below a `Buffer`, so one
/// instance serves every clone of the `Client`, and the bucket is shared without a lock.
pub struct RateLimited<S> {
    inner: S,
    bucket: TokenBucket,
    wait: Option<Pin<Box<Sleep>>>,
    // A token taken while the inner service was not ready yet is kept for the next call.
    has_token: bool,
}

impl<S, R> Service<R> for RateLimited<S>
where
    S: Service<R>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        while !self.has_token {
            if let Some(wait) = self.wait.as_mut() {
                ready!(wait.as_mut().poll(cx));
                self.wait = None;
            }
            match self.bucket.take(Instant::now()) {
                Ok(()) => self.has_token = true,
                Err(delay) => self.wait = Some(Box::pin(tokio::time::sleep(delay))),
            }
        }
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: R) -> S::Future {
        self.has_token = false;
        self.inner.call(request)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn burst_then_steady_rate() {
        let start = Instant::now();
        let mut bucket = TokenBucket::new(
            RateLimit {
                qps: 10.0,
                burst: 3,
            },
            start,
        );
        for _ in 0..3 {
            assert_eq!(bucket.take(start), Ok(()));
        }
        let wait = bucket.take(start).unwrap_err();
        assert!((wait.as_secs_f64() - 0.1).abs() < 1e-9, "{wait:?}");
        assert_eq!(bucket.take(start + Duration::from_millis(100)), Ok(()));
        // Idle time refills up to the burst, never beyond.
        let later = start + Duration::from_secs(60);
        for _ in 0..3 {
            assert_eq!(bucket.take(later), Ok(()));
        }
        assert!(bucket.take(later).is_err());
    }

    #[tokio::test(start_paused = true)]
    async fn service_waits_for_tokens() {
        use tower::ServiceExt;
        let service =
            tower::service_fn(|n: u32| async move { Ok::<_, std::convert::Infallible>(n) });
        let mut limited = RateLimitLayer::new(RateLimit { qps: 2.0, burst: 1 }).layer(service);
        let start = Instant::now();
        for n in 0..3 {
            assert_eq!(limited.ready().await.unwrap().call(n).await.unwrap(), n);
        }
        // One from the burst, then two at 2/s.
        assert_eq!(Instant::now() - start, Duration::from_secs(1));
    }
}
