//! Control: every check of `checks.rs` counts a violation when one is there. A ledger with
//! one injected fault of each kind must give exactly the expected counts (the scenarios
//! then show the same checks at zero on real runs, and scenario 5b shows the overlap and
//! duplicate checks firing on a real partition).

use crate::checks;
use crate::cluster::ClusterOptions;
use crate::{Setup, serial};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn controls_the_checks_count_injected_violations() {
    let _serial = serial();
    let setup = Setup::new(ClusterOptions::default()).await;
    sqlx::raw_sql(
        "INSERT INTO rel.expected VALUES (1, 'g1'), (2, 'g2'), (3, 'g3'), (4, 'g3'), (5, 'g3'),
                                         (6, 'g4');
         INSERT INTO rel.forbidden VALUES (7, 'rolled back');
         INSERT INTO rel.exits VALUES ('killed', 'kill', '2030-01-01 00:00:02+00');
         INSERT INTO rel.ledger (exec_id, key, message_id, group_id, kind, attempt, worker, pid,
                                 started_at, ended_at) VALUES
           -- fine
           (gen_random_uuid(), 1, 1, 'g1', 'work', 1, 'w', 1, '2030-01-01 00:00:00+00', '2030-01-01 00:00:01+00'),
           -- ran twice, its worker was never killed: a duplicate nobody explains
           (gen_random_uuid(), 2, 2, 'g2', 'work', 1, 'w', 1, '2030-01-01 00:00:00+00', '2030-01-01 00:00:01+00'),
           (gen_random_uuid(), 2, 2, 'g2', 'work', 2, 'w', 1, '2030-01-01 00:00:02+00', '2030-01-01 00:00:03+00'),
           -- key 3 never ran: lost
           -- two jobs of one group at once, and out of message-id order
           (gen_random_uuid(), 4, 5, 'g3', 'work', 1, 'w', 1, '2030-01-01 00:00:00+00', '2030-01-01 00:00:02+00'),
           (gen_random_uuid(), 5, 4, 'g3', 'work', 1, 'w', 1, '2030-01-01 00:00:01+00', '2030-01-01 00:00:03+00'),
           -- killed mid-run (explained), but re-run before the kill: two live executions
           (gen_random_uuid(), 6, 6, 'g4', 'work', 1, 'killed', 1, '2030-01-01 00:00:00+00', NULL),
           (gen_random_uuid(), 6, 6, 'g4', 'work', 2, 'w', 1, '2030-01-01 00:00:01+00', '2030-01-01 00:00:03+00'),
           -- a job whose transaction never committed ran
           (gen_random_uuid(), 7, 7, 'g5', 'work', 1, 'w', 1, '2030-01-01 00:00:00+00', '2030-01-01 00:00:01+00');",
    )
    .execute(&setup.admin)
    .await
    .unwrap();
    let counts = checks::counts(&setup.admin).await;
    eprintln!("{counts:?}");
    assert_eq!(counts.executions, 8);
    assert_eq!(counts.lost, 1, "key 3");
    assert_eq!(counts.duplicates, 2, "keys 2 and 6");
    assert_eq!(
        counts.unexplained_duplicates, 1,
        "key 2 (key 6's worker was killed)"
    );
    assert_eq!(counts.unfinished, 1);
    assert_eq!(counts.unexplained_unfinished, 0);
    assert_eq!(counts.overlaps, 2, "g3, and g4 before its kill");
    assert_eq!(counts.order_violations, 1, "g3");
    assert_eq!(counts.forbidden_ran, 1, "key 7");
    assert_eq!(counts.completed_twice, 1, "key 2");

    // an execution without an end whose process is not known to have ended lasts for ever
    sqlx::query("DELETE FROM rel.exits")
        .execute(&setup.admin)
        .await
        .unwrap();
    let counts = checks::counts(&setup.admin).await;
    assert_eq!(counts.unexplained_unfinished, 1);
    assert_eq!(counts.unexplained_duplicates, 2);
    assert_eq!(counts.overlaps, 2);
}
