//! The web dashboard in a real browser: Debian's headless Chromium, driven through
//! chromedriver (WebDriver) from Rust, against the router served on a local port over a
//! real PostgreSQL. Screenshots of each page go to `target/tmp/dashboard-screenshots/`.
//! The dashboard's database role has exactly the operator's grants.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use fantoccini::{Client, ClientBuilder, Locator};
use harel_jobs::dashboard::{self, DashboardConfig};
use harel_jobs::transport::{ClaimRequest, LeaseOutcome, OutgoingMessage};
use harel_jobs::{DeadLetters, JobContext, JobId, JobResult, Queue, job};
use harel_jobs_suite::chromium::{ChromeDriver, screenshot_dir};
use harel_jobs_suite::{OPERATOR_GRANTS, TestQueue, TestRole, pool_with};

/// Sends the mail (in the test: nothing), kept an hour once completed so its page shows it.
#[job(retain = "1h")]
async fn send_email(_ctx: JobContext<()>, to: String) -> JobResult {
    let _ = to;
    Ok(())
}

/// Serves `router` on a free local port until the test ends.
async fn serve(router: axum::Router) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let _ = axum::serve(listener, router).await;
    });
    address
}

/// A job of kind `send_email` turned into a dead letter.
async fn dead_letter(q: &TestQueue, to: &str, error: &str) -> JobId {
    let payload = serde_json::json!({ "to": to }).to_string();
    let message = OutgoingMessage::new("unused", "send_email", payload).in_own_group();
    let id = q.transport.publish(&q.pool, &message).await.unwrap();
    let claimed = q
        .transport
        .claim_many(
            &q.pool,
            &ClaimRequest::new(Duration::from_secs(60)).limit(100),
        )
        .await
        .unwrap();
    let lease = claimed
        .into_iter()
        .find(|m| m.lease.seq == id)
        .expect("claimed")
        .lease;
    let outcome = q
        .transport
        .dead_letter(&q.pool, &lease, error)
        .await
        .unwrap();
    assert_eq!(outcome, LeaseOutcome::Applied);
    JobId::new(id)
}

async fn browser(driver: &ChromeDriver) -> Client {
    ClientBuilder::new(hyper_util::client::legacy::connect::HttpConnector::new())
        .capabilities(ChromeDriver::capabilities())
        .connect(&driver.url)
        .await
        .expect("a Chromium session")
}

/// Saves a screenshot of what the browser shows as `name.png`.
async fn screenshot(client: &Client, name: &str) -> PathBuf {
    let png = client.screenshot().await.expect("screenshot");
    let path = screenshot_dir(env!("CARGO_TARGET_TMPDIR")).join(format!("{name}.png"));
    std::fs::write(&path, png).expect("save the screenshot");
    path
}

/// Clicks the element `locator` finds.
async fn click(client: &Client, locator: Locator<'_>) {
    client
        .find(locator)
        .await
        .unwrap_or_else(|e| panic!("{locator:?}: {e}"))
        .click()
        .await
        .unwrap();
}

async fn text(client: &Client, css: &str) -> String {
    client
        .find(Locator::Css(css))
        .await
        .unwrap_or_else(|e| panic!("{css}: {e}"))
        .text()
        .await
        .unwrap()
}

/// Reloads until the page's `css` element holds `needle` (at most 30 s).
async fn wait_for_text(client: &Client, css: &str, needle: &str) {
    let started = Instant::now();
    loop {
        if text(client, css).await.contains(needle) {
            return;
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "{css} never showed {needle:?}: {}",
            text(client, css).await
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
        client.refresh().await.unwrap();
    }
}

/// Waits until the browser's URL holds `needle` (a click's navigation is asynchronous).
async fn wait_for_url(client: &Client, needle: &str) -> String {
    let started = Instant::now();
    loop {
        let url = client.current_url().await.unwrap().to_string();
        if url.contains(needle) {
            return url;
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "the browser never went to {needle:?}: {url}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A raw HTTP request on a thread of its own (the server runs on the test's runtime);
/// returns the status code and the whole response.
async fn http(address: SocketAddr, request: String) -> (u16, String) {
    tokio::task::spawn_blocking(move || http_blocking(address, &request))
        .await
        .expect("the request's thread")
}

fn http_blocking(address: SocketAddr, request: &str) -> (u16, String) {
    let mut stream = TcpStream::connect(address).unwrap();
    stream.write_all(request.as_bytes()).unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    let status = response
        .split(' ')
        .nth(1)
        .and_then(|code| code.parse().ok())
        .unwrap_or_else(|| panic!("not an HTTP response: {response}"));
    (status, response)
}

async fn post(address: SocketAddr, path: &str, body: &str) -> (u16, String) {
    http(
        address,
        format!(
            "POST {path} HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\n\
             Content-Type: application/x-www-form-urlencoded\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        ),
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_uses_the_dashboard_in_a_browser() {
    let q = TestQueue::new().await;
    let role = TestRole::with_grants(&q, OPERATOR_GRANTS).await;
    let operator = pool_with(&role.url, 5).await;
    let queue = Queue::with_schema(operator.clone(), q.schema.clone());
    let owner = Queue::with_schema(q.pool.clone(), q.schema.clone());

    // last night's outage: two dead letters; today: some waiting and scheduled work
    let first_dead = dead_letter(&q, "a@example.com", "smtp: 421 try again later").await;
    let second_dead = dead_letter(&q, "b@example.com", "smtp: 421 try again later").await;
    let third_dead = dead_letter(&q, "c@example.com", "smtp: 550 no such user").await;
    let target = dead_letter(&q, "d@example.com", "boom").await;
    for n in 0..3 {
        let message = OutgoingMessage::new("customer-42", "sync_crm", format!("{{\"n\":{n}}}"));
        q.transport.publish(&q.pool, &message).await.unwrap();
    }
    let later = OutgoingMessage::new("unused", "build_report", "{\"month\":\"2026-11\"}")
        .in_own_group()
        .delay(Duration::from_secs(3600));
    let scheduled = JobId::new(q.transport.publish(&q.pool, &later).await.unwrap());

    let address = serve(dashboard::router(queue.clone())).await;
    let base = format!("http://{address}");
    let driver = ChromeDriver::start();
    let client = browser(&driver).await;

    // the overview
    client.goto(&format!("{base}/")).await.unwrap();
    assert_eq!(text(&client, "h1").await, "Overview");
    let cards = text(&client, ".cards").await;
    assert!(cards.contains("Jobs in the queue\n4"), "{cards}");
    assert!(cards.contains("Dead letters\n4"), "{cards}");
    let latest = text(&client, "#latest-dead table").await;
    assert!(
        latest.contains(&first_dead.to_string()) && latest.contains("smtp: 421"),
        "{latest}"
    );
    // depth by queue, priority and state: customer-42 ready, the report scheduled
    let depth = text(&client, "#depth tbody").await;
    assert!(depth.starts_with("default 2 1 "), "{depth}");
    assert!(depth.ends_with(" 0 0 1"), "{depth}");
    let oldest = text(&client, "#oldest-ready").await;
    assert!(oldest.contains("in default, priority 2"), "{oldest}");
    screenshot(&client, "overview").await;

    // jobs, filtered by state through the form
    client.goto(&format!("{base}/jobs")).await.unwrap();
    assert_eq!(
        client
            .find_all(Locator::Css("tbody tr"))
            .await
            .unwrap()
            .len(),
        8,
        "4 queued, 4 dead"
    );
    client
        .find(Locator::Id("filter-state"))
        .await
        .unwrap()
        .select_by_value("scheduled")
        .await
        .unwrap();
    click(&client, Locator::Id("filter-apply")).await;
    wait_for_url(&client, "state=scheduled").await;
    let url = client.current_url().await.unwrap();
    assert!(
        url.query().unwrap_or_default().contains("state=scheduled"),
        "{url}"
    );
    let rows = client.find_all(Locator::Css("tbody tr")).await.unwrap();
    assert_eq!(rows.len(), 1);
    let row = rows[0].text().await.unwrap();
    assert!(
        row.contains(&scheduled.to_string()) && row.contains("build_report"),
        "{row}"
    );
    screenshot(&client, "jobs_scheduled").await;
    // and by kind
    client.goto(&format!("{base}/jobs")).await.unwrap();
    client
        .find(Locator::Id("filter-kind"))
        .await
        .unwrap()
        .send_keys("sync_crm")
        .await
        .unwrap();
    click(&client, Locator::Id("filter-apply")).await;
    wait_for_url(&client, "kind=sync_crm").await;
    assert_eq!(
        client
            .find_all(Locator::Css("tbody tr"))
            .await
            .unwrap()
            .len(),
        3
    );

    // the groups, longest waiting first: the scheduled report's group is not waiting
    client.goto(&format!("{base}/groups")).await.unwrap();
    click(&client, Locator::Id("sort-waiting")).await;
    wait_for_url(&client, "sort=waiting").await;
    let rows = client.find_all(Locator::Css("tbody tr")).await.unwrap();
    assert_eq!(rows.len(), 1);
    assert!(
        rows[0]
            .text()
            .await
            .unwrap()
            .starts_with("customer-42 default waiting")
    );
    screenshot(&client, "groups_waiting").await;

    // a group
    client.goto(&format!("{base}/groups")).await.unwrap();
    click(&client, Locator::LinkText("customer-42")).await;
    wait_for_url(&client, "/groups/show").await;
    assert_eq!(text(&client, "h1").await, "Group customer-42");
    screenshot(&client, "group").await;

    // open a dead letter, retry it, and see the job run
    let worker = owner
        .worker(())
        .register::<SendEmail>()
        .poll_interval(Duration::from_millis(100))
        .build()
        .unwrap()
        .start();
    client.goto(&format!("{base}/dead")).await.unwrap();
    screenshot(&client, "dead_letters").await;
    click(&client, Locator::LinkText(&first_dead.to_string())).await;
    wait_for_url(&client, &format!("/dead/{first_dead}")).await;
    assert_eq!(
        text(&client, "h1").await,
        format!("Dead letter {first_dead}")
    );
    assert!(text(&client, "#error").await.contains("smtp: 421"));
    assert!(
        text(&client, "#payload")
            .await
            .contains("\"to\": \"a@example.com\"")
    );
    screenshot(&client, "dead_letter").await;
    click(&client, Locator::XPath("//button[text()='Retry']")).await;
    wait_for_url(&client, "/jobs/").await;
    assert!(text(&client, ".notice").await.contains("back in the queue"));
    let retried_url = client.current_url().await.unwrap();
    assert!(retried_url.path().starts_with("/jobs/"), "{retried_url}");
    wait_for_text(&client, ".fields", "completed").await;
    let timeline = text(&client, "#timeline").await;
    let events: Vec<&str> = timeline
        .lines()
        .map(|line| line.split_once(' ').map_or(line, |(_, rest)| rest))
        .map(|line| line.split_once(' ').map_or(line, |(_, rest)| rest))
        .collect();
    assert_eq!(
        events,
        ["enqueued", "attempt 1 started", "completed"],
        "{timeline}"
    );
    screenshot(&client, "job_completed").await;
    let new_id: i64 = retried_url
        .path()
        .trim_start_matches("/jobs/")
        .parse()
        .unwrap();
    let job = owner
        .job(JobId::new(new_id))
        .await
        .unwrap()
        .expect("retained");
    assert!(
        matches!(job.state, harel_jobs::JobState::Completed { .. }),
        "{:?}",
        job.state
    );

    // bulk: select all, untick one, delete, confirm in the browser's dialog
    client.goto(&format!("{base}/dead")).await.unwrap();
    click(&client, Locator::Css("input[data-select-all]")).await;
    let boxes = client
        .find_all(Locator::Css("input[name=id]"))
        .await
        .unwrap();
    assert_eq!(boxes.len(), 3);
    for one in &boxes {
        assert_eq!(one.prop("checked").await.unwrap().as_deref(), Some("true"));
    }
    click(
        &client,
        Locator::Css(&format!("input[name=id][value='{target}']")),
    )
    .await;
    click(&client, Locator::Id("delete-selected")).await;
    let question = client.get_alert_text().await.expect("asks first");
    assert!(question.contains("selected dead letters"), "{question}");
    client.accept_alert().await.unwrap();
    wait_for_url(&client, "done=deleted").await;
    wait_for_text(&client, "main", "Deleted 2 dead letter(s).").await;
    screenshot(&client, "dead_letters_deleted").await;
    let dead = DeadLetters::new(q.schema.clone());
    for id in [second_dead, third_dead] {
        assert!(dead.get(&q.pool, id).await.unwrap().is_none());
    }

    // cancel a job from its page
    client
        .goto(&format!("{base}/jobs/{scheduled}"))
        .await
        .unwrap();
    client
        .find(Locator::Css("input[name=reason]"))
        .await
        .unwrap()
        .send_keys("not needed this month")
        .await
        .unwrap();
    click(&client, Locator::Id("cancel-job")).await;
    client.accept_alert().await.unwrap();
    wait_for_url(&client, "done=").await;
    wait_for_text(&client, ".fields", "cancelled").await;
    assert!(
        text(&client, ".fields")
            .await
            .contains("not needed this month")
    );
    screenshot(&client, "job_cancelled").await;

    // a POST without the page's CSRF token is refused, and changes nothing
    let (status, body) = post(address, "/dead/retry", &format!("id={target}")).await;
    assert_eq!(status, 403, "{body}");
    assert!(body.contains("CSRF"), "{body}");
    let (status, _) = post(address, "/dead/delete", &format!("csrf=guess&id={target}")).await;
    assert_eq!(status, 403);
    let (status, _) = post(address, &format!("/jobs/{target}/cancel"), "").await;
    assert_eq!(status, 403);
    assert!(dead.get(&q.pool, target).await.unwrap().is_some());

    // a dead job's own page: its timeline, and Retry (after a confirmation)
    client.goto(&format!("{base}/jobs/{target}")).await.unwrap();
    let timeline = text(&client, "#timeline").await;
    assert!(
        timeline.ends_with("dead after an attempt failed"),
        "{timeline}"
    );
    screenshot(&client, "job_dead").await;
    click(&client, Locator::XPath("//button[text()='Retry']")).await;
    let question = client.get_alert_text().await.expect("asks first");
    assert!(question.contains(&target.to_string()), "{question}");
    client.accept_alert().await.unwrap();
    wait_for_url(&client, "done=retried").await;
    assert!(text(&client, ".notice").await.contains("back in the queue"));
    assert!(dead.get(&q.pool, target).await.unwrap().is_none());

    // pause the default queue, then resume it
    client.goto(&format!("{base}/queues")).await.unwrap();
    let row = "//tr[td/span[@class='queue-name' and text()='default']]";
    click(
        &client,
        Locator::XPath(&format!("{row}//button[text()='Pause']")),
    )
    .await;
    wait_for_url(&client, "done=paused").await;
    let paused_row = text_of(&client, row).await;
    assert!(paused_row.contains("paused since"), "{paused_row}");
    let default = |queues: Vec<harel_jobs::QueueInfo>| {
        queues
            .into_iter()
            .find(|queue| queue.name == harel_jobs::DEFAULT_QUEUE)
            .expect("the default queue")
    };
    assert!(default(owner.queues().await.unwrap()).is_paused());
    screenshot(&client, "queues_paused").await;
    click(
        &client,
        Locator::XPath(&format!("{row}//button[text()='Resume']")),
    )
    .await;
    wait_for_url(&client, "done=resumed").await;
    assert!(text_of(&client, row).await.contains("running"));
    assert!(!default(owner.queues().await.unwrap()).is_paused());
    screenshot(&client, "queues").await;

    // the worker pool's report (sent at its shutdown): the overview's chart and workers
    worker.shutdown().await.unwrap();
    client.goto(&format!("{base}/")).await.unwrap();
    let minutes = client
        .find_all(Locator::Css("figure.chart g.minute"))
        .await
        .unwrap();
    assert_eq!(minutes.len(), 30);
    let caption = text(&client, "figure.chart figcaption").await;
    assert!(!caption.contains(" 0 in all"), "{caption}");
    let pools = text(&client, "#workers table").await;
    assert!(
        pools.contains(&format!("(pid {})", std::process::id())) && pools.contains("stopped"),
        "{pools}"
    );
    screenshot(&client, "overview_after").await;

    client.close().await.unwrap();
    operator.close().await;
}

async fn text_of(client: &Client, xpath: &str) -> String {
    client
        .find(Locator::XPath(xpath))
        .await
        .unwrap_or_else(|e| panic!("{xpath}: {e}"))
        .text()
        .await
        .unwrap()
}

#[tokio::test]
async fn a_read_only_dashboard_shows_no_actions_and_refuses_every_post() {
    let q = TestQueue::new().await;
    let role = TestRole::with_grants(&q, OPERATOR_GRANTS).await;
    let operator = pool_with(&role.url, 3).await;
    let queue = Queue::with_schema(operator.clone(), q.schema.clone());
    let id = dead_letter(&q, "a@example.com", "boom").await;
    let router = dashboard::router_with(queue, DashboardConfig::new().read_only(true));
    let address = serve(router).await;

    let get = |path: &str| {
        http(
            address,
            format!("GET {path} HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\n\r\n"),
        )
    };
    let (status, page) = get(&format!("/dead/{id}")).await;
    assert_eq!(status, 200, "{page}");
    assert!(page.contains("Read-only"), "{page}");
    assert!(!page.contains("<form method=\"post\""), "{page}");
    let (_, queues) = get("/queues").await;
    assert!(
        queues.contains("default") && !queues.contains("<button"),
        "{queues}"
    );
    assert!(
        !page.contains("name=\"csrf\""),
        "no token to be had: {page}"
    );
    // every page answers, with the security headers
    for path in [
        "/",
        "/jobs",
        "/groups",
        "/dead",
        "/schedules",
        "/assets/style.css",
    ] {
        let (status, response) = get(path).await;
        assert_eq!(status, 200, "{path}: {response}");
        assert!(response.contains("frame-ancestors 'none'"), "{path}");
    }
    assert_eq!(get("/jobs/999999999").await.0, 404);
    assert_eq!(get("/jobs/x").await.0, 400);
    assert_eq!(get("/nowhere").await.0, 404);
    let (status, body) = post(address, "/dead/retry", &format!("id={id}")).await;
    assert_eq!(status, 403, "{body}");
    assert!(body.contains("read-only"), "{body}");
    let dead = DeadLetters::new(q.schema.clone());
    assert!(dead.get(&q.pool, id).await.unwrap().is_some());
    operator.close().await;
}

#[tokio::test]
async fn the_command_line_serves_the_dashboard_behind_a_token() {
    let q = TestQueue::new().await;
    let role = TestRole::with_grants(&q, OPERATOR_GRANTS).await;
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_harel-jobs-cli"))
        .args(["--database-url", &role.url, "--schema", q.schema.name()])
        .args(["dashboard", "--listen", "127.0.0.1:0"])
        .env("HAREL_DASHBOARD_TOKEN", "t0ken-for-the-test")
        .env_remove("DATABASE_URL")
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let mut line = String::new();
    std::io::BufRead::read_line(&mut std::io::BufReader::new(stderr), &mut line).unwrap();
    let address: SocketAddr = line
        .split("http://")
        .nth(1)
        .and_then(|rest| rest.split('/').next())
        .and_then(|a| a.parse().ok())
        .unwrap_or_else(|| panic!("no address in {line:?}"));
    assert!(!line.contains("without authentication"), "{line}");
    let request = |auth: &str| {
        http(
            address,
            format!("GET / HTTP/1.1\r\nHost: {address}\r\n{auth}Connection: close\r\n\r\n"),
        )
    };
    let (status, response) = request("").await;
    assert_eq!(status, 401, "{response}");
    assert!(
        response.contains("WWW-Authenticate: Bearer")
            || response.contains("www-authenticate: Bearer")
    );
    assert_eq!(request("Authorization: Bearer wrong\r\n").await.0, 401);
    let (status, page) = request("Authorization: Bearer t0ken-for-the-test\r\n").await;
    assert_eq!(status, 200, "{page}");
    assert!(page.contains("<h1>Overview</h1>"), "{page}");
    let _ = child.kill();
    let _ = child.wait();
}
