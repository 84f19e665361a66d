use harel_jobs::transport::{ClaimRequest, OutgoingMessage};
use harel_jobs_suite::TestQueue;
use std::time::Duration;

#[tokio::test]
async fn smoke() {
    let q = TestQueue::new().await;
    let t = &q.transport;
    let seq = t
        .publish(&q.pool, &OutgoingMessage::new("g1", "k", r#"{"a":1}"#))
        .await
        .unwrap();
    t.publish(&q.pool, &OutgoingMessage::new("g1", "k", r#"{"a":2}"#))
        .await
        .unwrap();
    let m = t
        .claim(&q.pool, &ClaimRequest::new(Duration::from_secs(5)))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(m.lease.seq, seq);
    assert_eq!(m.attempt, 1);
    assert!(
        t.claim(&q.pool, &ClaimRequest::new(Duration::from_secs(5)))
            .await
            .unwrap()
            .is_none()
    );
    assert!(t.ack(&q.pool, &m.lease).await.unwrap().is_applied());
    let m2 = t
        .claim(&q.pool, &ClaimRequest::new(Duration::from_secs(5)))
        .await
        .unwrap()
        .unwrap();
    assert!(t.ack(&q.pool, &m2.lease).await.unwrap().is_applied());
    assert!(!t.ack(&q.pool, &m2.lease).await.unwrap().is_applied());
    assert_eq!(q.count("transport_groups").await, 0);
    assert_eq!(q.count("transport_messages").await, 0);
}
