//! Scenario 9: hostile strings. Group ids and payloads with quotes, backslashes,
//! `'; DROP TABLE`, unicode, 1 MiB strings and NUL are stored and handed to the handler
//! byte for byte, or rejected before reaching the database with a typed error; the schema
//! is intact afterwards.

use std::collections::HashMap;
use std::time::Duration;

use harel_jobs::transport::{MAX_GROUP_BYTES, MAX_PAYLOAD_BYTES, OutgoingMessage, Transport};
use harel_jobs::{Client, DeadLetterQuery, Enqueue, InvalidMessage, PublishError};
use sqlx::PgPool;

use crate::checks::{self, Figures};
use crate::cluster::ClusterOptions;
use crate::jobs::Work;
use crate::{Setup, expect_keys, ms, serial};

fn hostile() -> Vec<String> {
    vec![
        "it's".into(),
        r"back\slash\\ and \n not a newline".into(),
        "'; DROP TABLE harel.transport_messages; --".into(),
        "\"; DROP SCHEMA harel CASCADE; --".into(),
        "Robert'); DROP TABLE rel.ledger;--".into(),
        "ünïcödé 中文 🦀 \u{202E}rtl\u{202C} e\u{0301} \u{FEFF}bom".into(),
        r"%_\% LIKE wildcards".into(),
        "$1 $$ @schema@ @channel@ :name ?".into(),
        "tab\tnew\nline\r\u{7}bell".into(),
        "{\"json\": [1, 2]} '[]' \u{1F4A9}".into(),
        "g".repeat(MAX_GROUP_BYTES),
    ]
}

/// The tables, columns and functions of the queue and ledger schemas.
async fn fingerprint(pool: &PgPool) -> String {
    sqlx::query_scalar(
        "SELECT (SELECT string_agg(table_schema || '.' || table_name || '.' || column_name
                                   || ':' || data_type, ',' ORDER BY 1)
                   FROM information_schema.columns WHERE table_schema IN ('harel', 'rel'))
             || ' | ' ||
                (SELECT string_agg(proname, ',' ORDER BY proname) FROM pg_proc
                  WHERE pronamespace = 'harel'::regnamespace)",
    )
    .fetch_one(pool)
    .await
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s9_hostile_strings_are_stored_exactly_or_rejected_with_a_typed_error() {
    let _serial = serial();
    let setup = Setup::new(ClusterOptions::default()).await;
    let before = fingerprint(&setup.admin).await;
    let mut fleet = setup.fleet(
        "hostile-w",
        &[
            ("HAREL_FW_CONCURRENCY", "4".into()),
            ("HAREL_FW_MAX_ATTEMPTS", "1".into()),
            ms("HAREL_FW_POLL_MS", Duration::from_millis(200)),
        ],
    );
    fleet.spawn(0);

    // accepted: every hostile string as a group and as a payload, a 1 MiB payload, NUL in
    // a payload (JSON escapes it as \u0000)
    let mut accepted: HashMap<i64, (String, String)> = HashMap::new();
    let mut texts = hostile();
    texts.push(format!("{}🦀", "x".repeat(1 << 20)));
    texts.push("nul \0 inside".into());
    let groups = hostile();
    for (i, text) in texts.iter().enumerate() {
        let key = i as i64;
        let group = groups[i % groups.len()].clone();
        let job = Work {
            key,
            sleep_ms: 0,
            text: Some(text.clone()),
        };
        let mut tx = setup.admin.begin().await.unwrap();
        Enqueue::new(job, &mut *tx)
            .group(group.clone())
            .await
            .unwrap_or_else(|e| panic!("job {key} refused: {e}"));
        expect_keys(&mut *tx, &[(key, group.clone(), 0)]).await;
        tx.commit().await.unwrap();
        accepted.insert(key, (group, text.clone()));
    }

    // rejected before the database, each with its own error
    let work = |text: Option<String>| Work {
        key: 999,
        sleep_ms: 0,
        text,
    };
    let big_group = "g".repeat(1 << 20);
    let refused = [
        (
            Enqueue::new(work(None), &setup.admin)
                .group(big_group)
                .await,
            "1 MiB group",
        ),
        (
            Enqueue::new(work(None), &setup.admin).group("a\0b").await,
            "NUL in group",
        ),
        (
            Enqueue::new(work(None), &setup.admin).group("").await,
            "empty group",
        ),
        (
            Enqueue::new(work(Some("x".repeat(MAX_PAYLOAD_BYTES))), &setup.admin)
                .group("g")
                .await,
            "payload over 4 MiB",
        ),
    ];
    let mut rejections = Vec::new();
    for (result, what) in refused {
        let error = result.expect_err(what);
        rejections.push(format!("{what}: {error}"));
        match (what, &error) {
            ("1 MiB group", PublishError::Invalid(InvalidMessage::GroupTooLong { len, .. })) => {
                assert_eq!(*len, 1 << 20)
            }
            ("NUL in group", PublishError::Invalid(InvalidMessage::NulInGroup)) => {}
            ("empty group", PublishError::Invalid(InvalidMessage::EmptyGroup)) => {}
            (
                "payload over 4 MiB",
                PublishError::Invalid(InvalidMessage::PayloadTooLarge { .. }),
            ) => {}
            _ => panic!("{what}: unexpected error {error:?}"),
        }
    }
    // a hostile job kind: nobody handles it, it ends as a dead letter, kept exactly
    let kind = "'; DROP TABLE harel.dead_letters; -- \\ \u{1F980}";
    let dead_id = Transport::default()
        .publish(
            &setup.admin,
            &OutgoingMessage::new("hostile-kind", kind, "{}"),
        )
        .await
        .unwrap();

    checks::wait_until_done(&setup.admin, Duration::from_secs(120)).await;
    let admin = setup.admin.clone();
    crate::wait_for(
        "the hostile kind is dead-lettered",
        Duration::from_secs(30),
        || {
            let admin = admin.clone();
            async move {
                Client::new(admin.clone())
                    .dead_letters()
                    .count()
                    .await
                    .unwrap_or(0)
                    == 1
            }
        },
    )
    .await;
    fleet
        .terminate_all(Duration::from_secs(60), &setup.admin)
        .await;
    let counts = checks::counts(&setup.admin).await;
    let after = fingerprint(&setup.admin).await;

    let rows: Vec<(i64, String, Option<Vec<u8>>)> =
        sqlx::query_as("SELECT key, group_id, note FROM rel.ledger WHERE ended_at IS NOT NULL")
            .fetch_all(&setup.admin)
            .await
            .unwrap();
    let mut exact = 0;
    for (key, group, note) in &rows {
        let (want_group, want_text) = &accepted[key];
        assert_eq!(group, want_group, "job {key}: group id changed");
        assert_eq!(
            note.as_deref(),
            Some(want_text.as_bytes()),
            "job {key}: payload text changed"
        );
        exact += 1;
    }
    let letters = Client::new(setup.admin.clone())
        .dead_letters()
        .list(&DeadLetterQuery::default())
        .await
        .unwrap();

    checks::report(
        &setup.admin,
        &Figures {
            scenario: "9. hostile strings",
            load: format!(
                "{} jobs with hostile group ids and payloads (incl. 1 MiB, NUL), 1 hostile kind",
                accepted.len()
            ),
            faults: "quotes, backslashes, `'; DROP TABLE`, unicode, 1 MiB, NUL".into(),
            enqueued: accepted.len() as i64,
            completed: counts.completed,
            duplicates: counts.duplicates.to_string(),
            lost: counts.lost,
            max_lease_overrun: Duration::ZERO,
            notes: format!(
                "{exact} stored and handed over byte for byte; rejected with typed errors: {}; schema unchanged",
                rejections.join("; ")
            ),
        },
        &counts,
    )
    .await;

    assert_eq!(
        exact,
        accepted.len(),
        "every accepted job ran with its exact strings"
    );
    assert_eq!(counts.lost, 0);
    assert_eq!(counts.duplicates, 0);
    assert_eq!(letters.len(), 1);
    assert_eq!(letters[0].id, dead_id);
    assert_eq!(letters[0].kind, kind, "the hostile kind is kept exactly");
    assert_eq!(before, after, "the schema is intact");
    assert_eq!(counts.queue_left, 0);
}
