//! The web dashboard in a real browser: Debian's headless Chromium, driven through
//! chromedriver (WebDriver) from Rust, against the router served on a local port over a
//! real PostgreSQL. Screenshots of each page go to `target/tmp/dashboard-screenshots/`.
//! The dashboard's database role has exactly the operator's grants.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use fantoccini::{Client as Browser, ClientBuilder, Locator};
use harel_jobs::dashboard::{self, DashboardConfig};
use harel_jobs::transport::{ClaimRequest, LeaseOutcome, OutgoingMessage};
use harel_jobs::{Client, JobContext, JobId, JobResult, job};
use harel_jobs_suite::chromium::{ChromeDriver, screenshot_dir};
use harel_jobs_suite::{OPERATOR_GRANTS, SuiteSchema, TestRole, pool_with};

/// Sends the mail (in the test: nothing), kept an hour once completed so its page shows it.
#[job(retain = "1h")]
async fn send_email(_ctx: JobContext<()>, to: String) -> JobResult {
    let _ = to;
    Ok(())
}

/// Serves `router` on a free local port until the test ends.
async fn serve(router: axum::Router) -> SocketAddr {
    let listener = bind().await;
    let address = listener.local_addr().unwrap();
    serve_on(listener, router);
    address
}

/// A free local port, bound (its address is what the dashboard's allowed hosts name).
async fn bind() -> tokio::net::TcpListener {
    tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap()
}

/// Serves `router` on `listener` until the test ends.
fn serve_on(listener: tokio::net::TcpListener, router: axum::Router) {
    tokio::spawn(async move {
        let _ = axum::serve(listener, router).await;
    });
}

/// A test's schema, an operator role with exactly the documented grants (its pool has
/// `connections`), and clients of the schema as that operator (what the dashboard serves)
/// and as its owner: `(q, role, operator, queue, owner)`.
///
/// Bind the schema and the role to names (`_role` if unused), never to `_`: they are guards,
/// and `_` drops them at the end of the `let`, the schema or the role's grants with them.
async fn operated(connections: u32) -> (SuiteSchema, TestRole, sqlx::PgPool, Client, Client) {
    let q = SuiteSchema::new().await;
    let role = TestRole::with_grants(&q, OPERATOR_GRANTS).await;
    let operator = pool_with(&role.url, connections).await;
    let queue = Client::with_schema(operator.clone(), q.schema.clone());
    let owner = Client::with_schema(q.pool.clone(), q.schema.clone());
    (q, role, operator, queue, owner)
}

/// `queue`'s dashboard (passed through `wrap`, a layer of the test's own) served on a free
/// port with that one name allowed, as `harel-jobs dashboard` sets it (every request of the
/// browser passes the Host check, every form POST the Origin check), and a browser session
/// on it: `(address, base, client, driver)`, `base` being `http://` and the address.
///
/// Bind the driver to a name (`_driver`), never to `_`: it would stop at the end of the `let`.
async fn open(
    queue: Client,
    wrap: impl FnOnce(axum::Router) -> axum::Router,
) -> (SocketAddr, String, Browser, ChromeDriver) {
    let listener = bind().await;
    let address = listener.local_addr().unwrap();
    let config = DashboardConfig::new()
        .allowed_hosts([address.to_string()])
        .unwrap();
    serve_on(listener, wrap(dashboard::router_with(queue, config)));
    let driver = ChromeDriver::start();
    let client = browser(&driver).await;
    (address, format!("http://{address}"), client, driver)
}

/// What a browser sent with a POST: `Origin`, `Sec-Fetch-Site`, `Referer`.
type SentHeaders = Arc<Mutex<Vec<[Option<String>; 3]>>>;

/// `router` with the headers of every POST it receives written down in `sent`.
fn record_posts(router: axum::Router, sent: SentHeaders) -> axum::Router {
    router.layer(axum::middleware::from_fn(
        move |request: axum::extract::Request, next: axum::middleware::Next| {
            let sent = Arc::clone(&sent);
            async move {
                if request.method() == axum::http::Method::POST {
                    let header = |name: &str| {
                        request
                            .headers()
                            .get(name)
                            .map(|v| v.to_str().unwrap_or("(not text)").to_owned())
                    };
                    let headers = [
                        header("origin"),
                        header("sec-fetch-site"),
                        header("referer"),
                    ];
                    sent.lock().unwrap().push(headers);
                }
                next.run(request).await
            }
        },
    ))
}

/// A job of kind `send_email` turned into a dead letter.
async fn dead_letter(q: &SuiteSchema, to: &str, error: &str) -> JobId {
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
        .find(|m| m.lease.id == id)
        .expect("claimed")
        .lease;
    let outcome = q
        .transport
        .dead_letter(&q.pool, &lease, error)
        .await
        .unwrap();
    assert_eq!(outcome, LeaseOutcome::Applied);
    id
}

async fn browser(driver: &ChromeDriver) -> Browser {
    ClientBuilder::new(hyper_util::client::legacy::connect::HttpConnector::new())
        .capabilities(ChromeDriver::capabilities())
        .connect(&driver.url)
        .await
        .expect("a Chromium session")
}

/// Saves a screenshot of what the browser shows as `name.png`.
async fn screenshot(client: &Browser, name: &str) -> PathBuf {
    let png = client.screenshot().await.expect("screenshot");
    let path = screenshot_dir(env!("CARGO_TARGET_TMPDIR")).join(format!("{name}.png"));
    std::fs::write(&path, png).expect("save the screenshot");
    path
}

/// Clicks the element `locator` finds.
async fn click(client: &Browser, locator: Locator<'_>) {
    client
        .find(locator)
        .await
        .unwrap_or_else(|e| panic!("{locator:?}: {e}"))
        .click()
        .await
        .unwrap();
}

async fn text(client: &Browser, css: &str) -> String {
    client
        .find(Locator::Css(css))
        .await
        .unwrap_or_else(|e| panic!("{css}: {e}"))
        .text()
        .await
        .unwrap()
}

/// Reloads until the page's `css` element holds `needle` (at most 30 s).
async fn wait_for_text(client: &Browser, css: &str, needle: &str) {
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
async fn wait_for_url(client: &Browser, needle: &str) -> String {
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

/// A form POST from the dashboard's own origin (so that only the CSRF token is judged).
async fn post(address: SocketAddr, path: &str, body: &str) -> (u16, String) {
    let origin = format!("Origin: http://{address}\r\n");
    post_with(address, path, &address.to_string(), &origin, body).await
}

/// A form POST with `Host: host` and the extra header lines `headers` (each ending in
/// `\r\n`).
async fn post_with(
    address: SocketAddr,
    path: &str,
    host: &str,
    headers: &str,
    body: &str,
) -> (u16, String) {
    http(
        address,
        format!(
            "POST {path} HTTP/1.1\r\nHost: {host}\r\n{headers}Connection: close\r\n\
             Content-Type: application/x-www-form-urlencoded\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        ),
    )
    .await
}

/// A GET with `Host: host`.
async fn get_as(address: SocketAddr, path: &str, host: &str) -> (u16, String) {
    http(
        address,
        format!("GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"),
    )
    .await
}

/// The CSRF token in a page.
fn csrf_of(page: &str) -> String {
    let (_, rest) = page
        .split_once("name=\"csrf\" value=\"")
        .unwrap_or_else(|| panic!("no CSRF token in {page}"));
    rest.split('"').next().unwrap().to_owned()
}

/// Whether the queue `name` is paused, as the owner sees it.
async fn paused(owner: &Client, name: &str) -> bool {
    owner
        .queues()
        .await
        .unwrap()
        .into_iter()
        .find(|queue| queue.name == name)
        .is_some_and(|queue| queue.is_paused())
}

/// The weight and ready groups of the fairness key `key` of the default queue, if listed.
async fn fair_key(owner: &Client, key: &str) -> Option<(u32, harel_jobs::Count)> {
    owner
        .fair_keys(harel_jobs::DEFAULT_QUEUE, None, 100)
        .await
        .unwrap()
        .keys
        .into_iter()
        .find(|info| info.key == key)
        .map(|info| (info.weight, info.ready))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_uses_the_dashboard_in_a_browser() {
    let (q, _role, operator, queue, owner) = operated(5).await;

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
    let scheduled = q.transport.publish(&q.pool, &later).await.unwrap();

    // with its one name set, as `harel-jobs dashboard` does; every POST's headers noted
    let sent = SentHeaders::default();
    let (address, base, client, _driver) = open(queue.clone(), |router| {
        record_posts(router, Arc::clone(&sent))
    })
    .await;

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
    assert_eq!(events.len(), 3, "{timeline}");
    assert_eq!(
        (events[0], events[2]),
        ("enqueued", "completed"),
        "{timeline}"
    );
    assert!(
        events[1].starts_with("attempt 1 started on "),
        "the pool that ran it: {timeline}"
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
    let dead = Client::with_schema(q.pool.clone(), q.schema.clone()).dead_letters();
    for id in [second_dead, third_dead] {
        assert!(dead.get(id).await.unwrap().is_none());
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
    assert!(dead.get(target).await.unwrap().is_some());

    // a dead job's own page: its timeline, and Retry (after a confirmation)
    client.goto(&format!("{base}/jobs/{target}")).await.unwrap();
    let timeline = text(&client, "#timeline").await;
    assert!(
        timeline.contains("attempt 1 started")
            && timeline.contains("attempt 1 failed for good: dead"),
        "{timeline}"
    );
    let attempts = text(&client, "#attempts").await;
    assert!(
        attempts.contains("dead"),
        "its attempts, as a table: {attempts}"
    );
    screenshot(&client, "job_dead").await;
    click(&client, Locator::XPath("//button[text()='Retry']")).await;
    let question = client.get_alert_text().await.expect("asks first");
    assert!(question.contains(&target.to_string()), "{question}");
    client.accept_alert().await.unwrap();
    wait_for_url(&client, "done=retried").await;
    assert!(text(&client, ".notice").await.contains("back in the queue"));
    assert!(dead.get(target).await.unwrap().is_none());

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

    // fairness keys: two tenants' work in the default queue (published now that the worker
    // pool is gone, so it stays ready), seen from the queue's row, a weight set from the page
    let keyed: Vec<OutgoingMessage> = [
        ("a-1", "tenant-a"),
        ("a-2", "tenant-a"),
        ("b-1", "tenant-b"),
    ]
    .into_iter()
    .map(|(group, key)| OutgoingMessage::new(group, "sync_crm", "{}").fair_key(key))
    .collect();
    q.transport.publish_many(&q.pool, &keyed).await.unwrap();
    client.goto(&format!("{base}/queues")).await.unwrap();
    click(&client, Locator::XPath(&format!("{row}//a[text()='Keys']"))).await;
    wait_for_url(&client, "/queues/keys?name=default").await;
    assert_eq!(text(&client, "h1").await, "Fairness keys of default");
    let key_row = |key: &str| format!("//tr[td/span[@class='fair-key' and text()='{key}']]");
    let tenant_a = text_of(&client, &key_row("tenant-a")).await;
    assert!(tenant_a.starts_with("tenant-a 1 2"), "{tenant_a}");
    let tenant_b = text_of(&client, &key_row("tenant-b")).await;
    assert!(tenant_b.starts_with("tenant-b 1 1"), "{tenant_b}");
    screenshot(&client, "queue_keys").await;
    // a listed key's weight, from its row
    let input = client
        .find(Locator::XPath(&format!(
            "{}//input[@name='weight']",
            key_row("tenant-a")
        )))
        .await
        .unwrap();
    input.clear().await.unwrap();
    input.send_keys("5").await.unwrap();
    click(
        &client,
        Locator::XPath(&format!("{}//button[text()='Set']", key_row("tenant-a"))),
    )
    .await;
    wait_for_url(&client, "done=weight_set").await;
    assert!(text(&client, ".notice").await.contains("Weight set"));
    let tenant_a = text_of(&client, &key_row("tenant-a")).await;
    assert!(tenant_a.starts_with("tenant-a 5 2"), "{tenant_a}");
    assert_eq!(
        fair_key(&owner, "tenant-a").await,
        Some((5, harel_jobs::Count::Exact(2)))
    );
    // a key not listed yet (no work of its own so far), from the form below the table
    client
        .goto(&format!("{base}/queues/keys?name=default"))
        .await
        .unwrap();
    assert!(fair_key(&owner, "tenant-c").await.is_none());
    client
        .find(Locator::Id("new-key"))
        .await
        .unwrap()
        .send_keys("tenant-c")
        .await
        .unwrap();
    let input = client.find(Locator::Id("new-weight")).await.unwrap();
    input.clear().await.unwrap();
    input.send_keys("7").await.unwrap();
    click(&client, Locator::Id("set-new-weight")).await;
    wait_for_url(&client, "done=weight_set").await;
    let tenant_c = text_of(&client, &key_row("tenant-c")).await;
    assert!(tenant_c.starts_with("tenant-c 7 0"), "{tenant_c}");
    assert_eq!(
        fair_key(&owner, "tenant-c").await,
        Some((7, harel_jobs::Count::Exact(0)))
    );
    screenshot(&client, "queue_keys_weighted").await;
    // bad input is refused with 400, changing nothing; so is a post without the token
    let (_, page) = get_as(address, "/queues/keys?name=default", &address.to_string()).await;
    let csrf = csrf_of(&page);
    let long = "k".repeat(256);
    for body in [
        format!("csrf={csrf}&name=default&key=tenant-a&weight=0"),
        format!("csrf={csrf}&name=default&key=tenant-a&weight=1001"),
        format!("csrf={csrf}&name=default&key=tenant-a&weight=abc"),
        format!("csrf={csrf}&name=default&key=tenant-a&weight=-3"),
        format!("csrf={csrf}&name=default&key=tenant-a&weight=4294967297"),
        format!("csrf={csrf}&name=default&key=tenant-a"),
        format!("csrf={csrf}&name=default&weight=2"),
        format!("csrf={csrf}&name=default&key={long}&weight=2"),
        format!("csrf={csrf}&name=default&key=a%00b&weight=2"),
        format!("csrf={csrf}&key=tenant-a&weight=2"),
        format!("csrf={csrf}&name=no+such+queue&key=tenant-a&weight=2"),
    ] {
        let (status, response) = post(address, "/queues/weight", &body).await;
        assert_eq!(status, 400, "{body}: {response}");
    }
    let (status, response) = post(
        address,
        "/queues/weight",
        "name=default&key=tenant-a&weight=9",
    )
    .await;
    assert_eq!(status, 403, "{response}");
    assert!(response.contains("CSRF"), "{response}");
    let (status, _) = post(
        address,
        "/queues/weight",
        "csrf=guess&name=default&key=tenant-a&weight=9",
    )
    .await;
    assert_eq!(status, 403);
    assert_eq!(
        fair_key(&owner, "tenant-a").await,
        Some((5, harel_jobs::Count::Exact(2)))
    );
    // the page asks for a queue, by a valid name
    for path in [
        "/queues/keys",
        "/queues/keys?name=",
        "/queues/keys?name=a+b",
    ] {
        let (status, response) = get_as(address, path, &address.to_string()).await;
        assert_eq!(status, 400, "{path}: {response}");
    }
    // an unknown queue has no keys
    let (status, response) =
        get_as(address, "/queues/keys?name=nowhere", &address.to_string()).await;
    assert_eq!(status, 200, "{response}");
    assert!(
        response.contains("No fairness key in this queue"),
        "{response}"
    );

    // the limit per key, set from the page and shown above the keys; bad input is refused
    client
        .goto(&format!("{base}/queues/keys?name=default"))
        .await
        .unwrap();
    assert_eq!(text(&client, "#key-limit").await, "No limit per key.");
    let input = client.find(Locator::Id("key-limit-running")).await.unwrap();
    input.clear().await.unwrap();
    input.send_keys("3").await.unwrap();
    click(&client, Locator::Id("set-key-limit-button")).await;
    wait_for_url(&client, "done=key_limit_set").await;
    assert_eq!(
        text(&client, "#key-limit").await,
        "Each key: at most 3 running at once."
    );
    // from the page again (its URL without `done`, so that the wait below sees the new one)
    client
        .goto(&format!("{base}/queues/keys?name=default"))
        .await
        .unwrap();
    let rate = client.find(Locator::Id("key-limit-rate")).await.unwrap();
    rate.send_keys("20").await.unwrap();
    click(&client, Locator::Id("set-key-limit-button")).await;
    wait_for_url(&client, "done=key_limit_set").await;
    assert_eq!(
        text(&client, "#key-limit").await,
        "Each key: at most 3 running at once, at most 20 starts per 1000 ms."
    );
    assert_eq!(
        owner.fair_keys("default", None, 10).await.unwrap().limits,
        harel_jobs::KeyLimits::none()
            .concurrency(3)
            .rate(20, Duration::from_secs(1))
    );
    let limits = |page: harel_jobs::FairKeyPage| page.limits.concurrency_limit();
    assert_eq!(
        limits(owner.fair_keys("default", None, 10).await.unwrap()),
        Some(3)
    );
    let (_, page) = get_as(address, "/queues/keys?name=default", &address.to_string()).await;
    let csrf = csrf_of(&page);
    for body in [
        format!("csrf={csrf}&name=default&running=0"),
        format!("csrf={csrf}&name=default&running=1000001"),
        format!("csrf={csrf}&name=default&running=abc"),
        format!("csrf={csrf}&running=2"),
        format!("csrf={csrf}&name=default&rate=5&per_ms="),
        format!("csrf={csrf}&name=default&rate=5&per_ms=86400001"),
        format!("csrf={csrf}&name=default&rate=0&per_ms=1000"),
    ] {
        let (status, response) = post(address, "/queues/key-limit", &body).await;
        assert_eq!(status, 400, "{body}: {response}");
    }
    let (status, _) = post(address, "/queues/key-limit", "name=default&running=").await;
    assert_eq!(status, 403);
    assert_eq!(
        limits(owner.fair_keys("default", None, 10).await.unwrap()),
        Some(3)
    );
    let (status, _) = post(
        address,
        "/queues/key-limit",
        &format!("csrf={csrf}&name=default&running="),
    )
    .await;
    assert_eq!(status, 303);
    assert_eq!(
        limits(owner.fair_keys("default", None, 10).await.unwrap()),
        None
    );

    // what Chromium sent with each form POST: its Origin, always (the dashboard's
    // `Referrer-Policy: same-origin` keeps it from being `null`)
    let sent = sent.lock().unwrap().clone();
    let by_browser: Vec<_> = sent.iter().filter(|[_, site, _]| site.is_some()).collect();
    assert_eq!(by_browser.len(), 10, "{sent:?}");
    for [origin, site, referer] in by_browser {
        assert_eq!(origin.as_deref(), Some(base.as_str()), "{sent:?}");
        assert_eq!(site.as_deref(), Some("same-origin"), "{sent:?}");
        assert!(
            referer.as_deref().is_some_and(|r| r.starts_with(&base)),
            "{sent:?}"
        );
    }

    client.close().await.unwrap();
    operator.close().await;
}

async fn text_of(client: &Browser, xpath: &str) -> String {
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
    let (q, _role, operator, queue, owner) = operated(3).await;
    let id = dead_letter(&q, "a@example.com", "boom").await;
    // 101 weighted keys: the keys page shows 100 and links to the rest
    for n in 0..=100 {
        owner
            .set_fair_weight("default", &format!("k{n:03}"), 2)
            .await
            .unwrap();
    }
    let router = dashboard::router_with(queue.clone(), DashboardConfig::new().read_only(true));
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
        queues.contains("href=\"/queues/keys?name=default\""),
        "{queues}"
    );
    let (status, keys) = get("/queues/keys?name=default").await;
    assert_eq!(status, 200, "{keys}");
    assert!(keys.contains(">k000<") && keys.contains(">k099<"), "{keys}");
    assert!(!keys.contains(">k100<"), "{keys}");
    assert!(
        !keys.contains("<form") && !keys.contains("name=\"weight\"") && !keys.contains("csrf"),
        "{keys}"
    );
    let more = "href=\"/queues/keys?name=default&amp;after=k099\"";
    assert!(keys.contains(more), "{keys}");
    let (status, rest) = get("/queues/keys?name=default&after=k099").await;
    assert_eq!(status, 200, "{rest}");
    assert!(
        rest.contains(">k100<") && !rest.contains(">k099<"),
        "{rest}"
    );
    assert!(!rest.contains("after="), "no page after the last: {rest}");
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
        "/workflows",
        "/queues/keys?name=default",
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
    // no "Cancel all matching": no button, its page and its POST refused
    let (_, jobs) = get("/jobs").await;
    assert!(!jobs.contains("cancel-all"), "{jobs}");
    assert_eq!(get("/jobs/cancel-all").await.0, 403);
    let (status, body) = post(address, "/jobs/cancel-all", &format!("upto={id}")).await;
    assert_eq!(status, 403, "{body}");
    assert!(body.contains("read-only"), "{body}");
    let dead = Client::with_schema(q.pool.clone(), q.schema.clone()).dead_letters();
    assert!(dead.get(id).await.unwrap().is_some());
    let (status, body) = post(address, "/queues/weight", "name=default&key=k000&weight=9").await;
    assert_eq!(status, 403, "{body}");
    assert!(body.contains("read-only"), "{body}");
    let (status, body) = post(address, "/queues/key-limit", "name=default&running=1").await;
    assert_eq!(status, 403, "{body}");
    assert!(body.contains("read-only"), "{body}");
    assert!(!keys.contains("key-limit-running"), "{keys}");
    let first = owner.fair_keys("default", None, 1).await.unwrap();
    assert_eq!(
        (first.keys[0].key.as_str(), first.keys[0].weight),
        ("k000", 2)
    );
    assert_eq!(first.limits.concurrency_limit(), None);

    // a workflow's page shows no cancel or retry, and their POSTs are refused
    let mut w = owner.workflow("ro");
    w.task(
        "a",
        SendEmail { to: "x".into() },
        &harel_jobs::EnqueueOptions::new(),
    )
    .unwrap();
    let enqueued = w.enqueue(&q.pool).await.unwrap();
    let (status, page) = get(&format!("/workflows/{}", enqueued.id)).await;
    assert_eq!(status, 200, "{page}");
    assert!(!page.contains("<form method=\"post\""), "{page}");
    for action in ["cancel", "retry"] {
        let (status, body) =
            post(address, &format!("/workflows/{}/{action}", enqueued.id), "").await;
        assert_eq!(status, 403, "{body}");
    }
    assert_eq!(
        owner
            .workflow_info(enqueued.id)
            .await
            .unwrap()
            .unwrap()
            .ended,
        0
    );
    operator.close().await;
}

/// An operator follows a failed workflow in the browser: the list, its page (the graph's
/// layers, each task's state and parents), Retry and Cancel, each confirmed first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_follows_a_workflow_in_the_browser() {
    let (q, _role, operator, queue, owner) = operated(3).await;
    let mut w = owner.workflow("nightly-export");
    let email = |to: &str| SendEmail { to: to.to_owned() };
    let none = harel_jobs::EnqueueOptions::new();
    let fetch = w.task("fetch", email("a"), &none).unwrap();
    let after_fetch = harel_jobs::EnqueueOptions::new().after([fetch]);
    let left = w.task("left", email("b"), &after_fetch).unwrap();
    let right = w.task("right", email("c"), &after_fetch).unwrap();
    w.task(
        "zip",
        email("d"),
        &harel_jobs::EnqueueOptions::new().after([left, right]),
    )
    .unwrap();
    let enqueued = w.enqueue(&q.pool).await.unwrap();
    // fetch fails for good: the rest is cancelled
    let lease = q
        .transport
        .claim_many(
            &q.pool,
            &ClaimRequest::new(Duration::from_secs(60)).limit(10),
        )
        .await
        .unwrap()
        .remove(0)
        .lease;
    assert_eq!(
        q.transport
            .dead_letter(&q.pool, &lease, "503")
            .await
            .unwrap(),
        LeaseOutcome::Applied
    );

    let (_, base, client, _driver) = open(queue, |router| router).await;

    client.goto(&format!("{base}/workflows")).await.unwrap();
    let list = text(&client, "tbody").await;
    assert!(
        list.contains("nightly-export") && list.contains("failed") && list.contains("4 / 4"),
        "{list}"
    );
    click(&client, Locator::LinkText(&enqueued.id.to_string())).await;
    wait_for_url(&client, &format!("/workflows/{}", enqueued.id)).await;
    let graph = text(&client, "#workflow-graph").await;
    assert!(
        graph.starts_with(
            "layer 1\nfetch dead\nlayer 2\nleft cancelled\nright cancelled\nlayer 3\nzip cancelled"
        ),
        "{graph}"
    );
    let tasks = text(&client, "table").await;
    assert!(
        tasks.contains("zip") && tasks.contains("left, right"),
        "{tasks}"
    );
    screenshot(&client, "workflow_failed").await;

    click(
        &client,
        Locator::XPath("//button[text()='Retry failed tasks']"),
    )
    .await;
    let question = client.get_alert_text().await.expect("asks first");
    assert!(question.contains("4 failed task(s)"), "{question}");
    client.accept_alert().await.unwrap();
    wait_for_url(&client, "done=workflow_retried").await;
    assert!(
        text(&client, ".notice")
            .await
            .contains("Enqueued 4 failed task(s) again")
    );
    let graph = text(&client, "#workflow-graph").await;
    assert!(
        graph.contains("fetch waiting") && graph.contains("zip pending"),
        "{graph}"
    );
    let info = owner.workflow_info(enqueued.id).await.unwrap().unwrap();
    assert_eq!((info.ended, info.failed), (0, 0));
    // a pending task's page says what it waits for, with links
    click(&client, Locator::LinkText("zip")).await;
    wait_for_url(&client, "/jobs/").await;
    let fields = text(&client, "dl").await;
    assert!(
        fields.contains("pending") && fields.contains("Waits for"),
        "{fields}"
    );
    client.back().await.unwrap();
    wait_for_url(&client, "done=workflow_retried").await;

    click(
        &client,
        Locator::XPath("//button[text()='Cancel workflow']"),
    )
    .await;
    client.get_alert_text().await.expect("asks first");
    client.accept_alert().await.unwrap();
    wait_for_url(&client, "done=workflow_cancelled").await;
    assert!(
        text(&client, ".notice")
            .await
            .contains("Cancelled 4 task(s)")
    );
    let info = owner.workflow_info(enqueued.id).await.unwrap().unwrap();
    assert_eq!((info.ended, info.failed), (4, 4));
    // the operator's cancel reads as one, with the counts by outcome (issue 42, item 8)
    assert_eq!(info.state.as_str(), "cancelled");
    let fields = text(&client, "dl").await;
    assert!(fields.contains("cancelled"), "{fields}");
    assert_eq!(
        text(&client, "#workflow-counts").await,
        "4 ended of 4: 0 completed, 0 dead, 4 cancelled"
    );
    client.goto(&format!("{base}/workflows")).await.unwrap();
    let list = text(&client, "tbody").await;
    assert!(
        list.contains("cancelled") && !list.contains("failed"),
        "{list}"
    );
    screenshot(&client, "workflow_cancelled").await;
    client.close().await.unwrap();
    operator.close().await;
}

/// Issue 42, item 6, in the browser: a task's dead letter and its job's page say which
/// workflow and task it is; its Retry (confirmed, saying so) puts the task back into its
/// workflow, with the tasks cancelled for it, and the new job's page says it is that task.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tasks_dead_letter_is_retried_into_its_workflow_in_the_browser() {
    let (q, _role, operator, queue, owner) = operated(3).await;
    let mut w = owner.workflow("nightly-export");
    let email = |to: &str| SendEmail { to: to.to_owned() };
    let fetch = w
        .task("fetch", email("a"), &harel_jobs::EnqueueOptions::new())
        .unwrap();
    w.task(
        "zip",
        email("b"),
        &harel_jobs::EnqueueOptions::new().after([fetch]),
    )
    .unwrap();
    let enqueued = w.enqueue(&q.pool).await.unwrap();
    let lease = q
        .transport
        .claim(&q.pool, &ClaimRequest::new(Duration::from_secs(60)))
        .await
        .unwrap()
        .expect("fetch")
        .lease;
    assert_eq!(lease.id, enqueued.jobs[0]);
    assert_eq!(
        q.transport
            .dead_letter(&q.pool, &lease, "503")
            .await
            .unwrap(),
        LeaseOutcome::Applied
    );
    let (_, base, client, _driver) = open(queue, |router| router).await;
    let named = format!("workflow {} (nightly-export), task fetch", enqueued.id);

    client
        .goto(&format!("{base}/jobs/{}", enqueued.jobs[0]))
        .await
        .unwrap();
    assert_eq!(text(&client, "#job-workflow").await, named);
    client
        .goto(&format!("{base}/dead/{}", enqueued.jobs[0]))
        .await
        .unwrap();
    assert_eq!(text(&client, "#job-workflow").await, named);
    click(&client, Locator::XPath("//button[text()='Retry']")).await;
    let question = client.get_alert_text().await.expect("asks first");
    assert!(question.contains("its workflow's task"), "{question}");
    client.accept_alert().await.unwrap();
    let url = wait_for_url(&client, "done=retried").await;
    assert!(
        !url.contains(&format!("/jobs/{}?", enqueued.jobs[0])),
        "{url}"
    );
    assert_eq!(text(&client, "#job-workflow").await, named);
    screenshot(&client, "dead_letter_retried_into_its_workflow").await;

    click(
        &client,
        Locator::LinkText(&format!("workflow {} (nightly-export)", enqueued.id)),
    )
    .await;
    wait_for_url(&client, &format!("/workflows/{}", enqueued.id)).await;
    let graph = text(&client, "#workflow-graph").await;
    assert!(
        graph.contains("fetch waiting") && graph.contains("zip pending"),
        "{graph}"
    );
    let info = owner.workflow_info(enqueued.id).await.unwrap().unwrap();
    assert_eq!(
        (info.state.as_str(), info.ended, info.failed),
        ("running", 0, 0)
    );
    client.close().await.unwrap();
    operator.close().await;
}

#[tokio::test]
async fn the_command_line_serves_the_dashboard_behind_a_token() {
    let q = SuiteSchema::new().await;
    let role = TestRole::with_grants(&q, OPERATOR_GRANTS).await;
    let (_child, address, line) = start_cli_dashboard(
        &role,
        &q,
        &[],
        &[("HAREL_DASHBOARD_TOKEN", "t0ken-for-the-test")],
    );
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
    // another name is refused before credentials are asked for: a rebinding page cannot
    // make the browser prompt for them under its own name
    let evil = format!("evil.example:{}", address.port());
    for auth in ["", "Authorization: Bearer t0ken-for-the-test\r\n"] {
        let (status, response) = http(
            address,
            format!("GET / HTTP/1.1\r\nHost: {evil}\r\n{auth}Connection: close\r\n\r\n"),
        )
        .await;
        assert_eq!(status, 421, "{response}");
        assert!(
            !response.to_lowercase().contains("www-authenticate"),
            "{response}"
        );
    }
}

/// DNS rebinding: a web page that points a name of its own (`evil.example`) at the
/// dashboard's address sends `Host: evil.example:PORT` and an `Origin` of that name. With
/// its names set, the dashboard answers such a request with 421, GET included (so the
/// page cannot even read the CSRF token), and takes a POST only from its own origin.
#[tokio::test]
async fn a_page_on_another_name_can_neither_read_the_dashboard_nor_post_to_it() {
    let (_q, _role, operator, queue, owner) = operated(3).await;
    let listener = bind().await;
    let address = listener.local_addr().unwrap();
    let port = address.port();
    let config = DashboardConfig::new()
        .allowed_hosts([address.to_string(), "jobs.internal".to_owned()])
        .unwrap();
    serve_on(listener, dashboard::router_with(queue, config));
    let ours = address.to_string();
    let evil = format!("evil.example:{port}");

    // reading: refused for any other name, every path, and without a Host
    for path in ["/", "/queues", "/dead", "/assets/style.css", "/nowhere"] {
        let (status, response) = get_as(address, path, &evil).await;
        assert_eq!(status, 421, "{path}: {response}");
        assert!(response.contains("DNS rebinding"), "{response}");
        assert!(!response.contains("csrf"), "{response}");
    }
    for host in [
        "jobs.internal.evil.example",
        "localhost",
        &format!("localhost:{port}"),
        &format!("127.0.0.1:{}", port.wrapping_add(1)),
        "",
        "a b",
    ] {
        let (status, response) = get_as(address, "/", host).await;
        assert_eq!(status, 421, "Host {host:?}: {response}");
    }
    let (status, _) = http(address, "GET / HTTP/1.0\r\n\r\n".to_owned()).await;
    assert_eq!(status, 421, "no Host at all");
    // a request target naming another host than the Host header
    let (status, _) = http(
        address,
        format!("GET http://{evil}/ HTTP/1.1\r\nHost: {ours}\r\nConnection: close\r\n\r\n"),
    )
    .await;
    assert_ne!(status, 200);
    // its own names: the address, and the configured name with any port
    for host in [ours.as_str(), "jobs.internal", "JOBS.internal:8443"] {
        let (status, response) = get_as(address, "/queues", host).await;
        assert_eq!(status, 200, "Host {host}: {response}");
    }
    let (_, page) = get_as(address, "/queues", &ours).await;
    let csrf = csrf_of(&page);
    let pause = format!("csrf={csrf}&name=default");
    let weigh = format!("csrf={csrf}&name=default&key=evil&weight=9");
    let limit = format!("csrf={csrf}&name=default&running=1");

    // posting with the token (as if the page had it): every foreign origin is refused
    let origin = |url: &str| format!("Origin: {url}\r\n");
    let refused = [
        // the rebinding itself: a Host and an Origin of the attacker's name
        (evil.clone(), origin(&format!("http://{evil}")), 421),
        // another origin, with the right Host
        (ours.clone(), origin("http://evil.example"), 403),
        (ours.clone(), origin(&format!("https://{evil}")), 403),
        (ours.clone(), origin("null"), 403),
        // the browser says the page is of another site (whatever the Origin says)
        (
            ours.clone(),
            format!(
                "{}Sec-Fetch-Site: cross-site\r\n",
                origin(&format!("http://{ours}"))
            ),
            403,
        ),
        (
            ours.clone(),
            "Sec-Fetch-Site: same-site\r\n".to_owned(),
            403,
        ),
        // nothing says where it comes from
        (ours.clone(), String::new(), 403),
        (
            ours.clone(),
            format!("Referer: http://{evil}/queues\r\n"),
            403,
        ),
    ];
    for (host, headers, expected) in &refused {
        let (status, response) = post_with(address, "/queues/pause", host, headers, &pause).await;
        assert_eq!(status, *expected, "Host {host}, {headers:?}: {response}");
        assert!(
            !paused(&owner, "default").await,
            "{headers:?} paused the queue"
        );
        let (status, response) = post_with(address, "/queues/weight", host, headers, &weigh).await;
        assert_eq!(status, *expected, "Host {host}, {headers:?}: {response}");
        assert!(
            fair_key(&owner, "evil").await.is_none(),
            "{headers:?} set a weight"
        );
        let (status, response) =
            post_with(address, "/queues/key-limit", host, headers, &limit).await;
        assert_eq!(status, *expected, "Host {host}, {headers:?}: {response}");
        assert_eq!(
            owner
                .fair_keys("default", None, 1)
                .await
                .unwrap()
                .limits
                .concurrency_limit(),
            None,
            "{headers:?} set a limit per key"
        );
    }
    let (_, response) = post_with(address, "/queues/pause", &ours, "", &pause).await;
    assert!(
        response.contains("does not say where it comes from"),
        "{response}"
    );

    // from its own origin, the action is taken: Origin, or without one the browser's
    // Sec-Fetch-Site or a same-origin Referer; Origin: null with Sec-Fetch-Site: same-origin
    // (a no-referrer policy around the router); an Origin of a configured name (a proxy
    // that rewrites Host)
    let accepted = [
        ("/queues/pause", origin(&format!("http://{ours}")), true),
        (
            "/queues/resume",
            "Sec-Fetch-Site: same-origin\r\n".to_owned(),
            false,
        ),
        (
            "/queues/pause",
            format!("Referer: http://{ours}/queues?done=resumed\r\n"),
            true,
        ),
        (
            "/queues/resume",
            format!("{}Sec-Fetch-Site: same-origin\r\n", origin("null")),
            false,
        ),
        ("/queues/pause", origin("https://jobs.internal"), true),
    ];
    for (path, headers, pauses) in &accepted {
        let (status, response) = post_with(address, path, &ours, headers, &pause).await;
        assert_eq!(status, 303, "{path} {headers:?}: {response}");
        assert_eq!(paused(&owner, "default").await, *pauses, "{headers:?}");
    }
    // and the CSRF token is still required from its own origin
    let (status, response) = post_with(
        address,
        "/queues/resume",
        &ours,
        &origin(&format!("http://{ours}")),
        "name=default",
    )
    .await;
    assert_eq!(status, 403, "{response}");
    assert!(response.contains("CSRF"), "{response}");
    assert!(paused(&owner, "default").await);
    let (status, response) = post_with(
        address,
        "/queues/weight",
        &ours,
        &origin(&format!("http://{ours}")),
        "name=default&key=evil&weight=9",
    )
    .await;
    assert_eq!(status, 403, "{response}");
    assert!(response.contains("CSRF"), "{response}");
    assert!(fair_key(&owner, "evil").await.is_none());
    // with both, the weight is set
    let (status, response) = post_with(
        address,
        "/queues/weight",
        &ours,
        &origin(&format!("http://{ours}")),
        &weigh,
    )
    .await;
    assert_eq!(status, 303, "{response}");
    assert!(fair_key(&owner, "evil").await.is_some());
    operator.close().await;
}

/// Mounted without its names (in an application that cannot say them), the router answers
/// any Host, and still takes a POST only from the origin the request is addressed to.
#[tokio::test]
async fn without_its_names_the_router_still_takes_posts_only_from_its_own_origin() {
    let (_q, _role, operator, queue, owner) = operated(3).await;
    let address = serve(dashboard::router(queue)).await;
    let ours = address.to_string();

    let (status, page) = get_as(address, "/queues", "jobs.example.com").await;
    assert_eq!(status, 200, "{page}");
    let pause = format!("csrf={}&name=default", csrf_of(&page));
    for origin in ["http://evil.example", "null", "http://127.0.0.1"] {
        let headers = format!("Origin: {origin}\r\n");
        let (status, response) = post_with(address, "/queues/pause", &ours, &headers, &pause).await;
        assert_eq!(status, 403, "Origin {origin}: {response}");
        assert!(!paused(&owner, "default").await, "Origin {origin}");
    }
    let headers = format!("Origin: http://{ours}\r\n");
    let (status, response) = post_with(address, "/queues/pause", &ours, &headers, &pause).await;
    assert_eq!(status, 303, "{response}");
    assert!(paused(&owner, "default").await);
    operator.close().await;
}

/// A child process, killed when dropped (also when an assertion fails).
struct Killed(std::process::Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `harel-jobs dashboard` on `role`'s view of `q`, with `args` and `env` added; returns the
/// process, the address it printed and its first line.
fn start_cli_dashboard(
    role: &TestRole,
    q: &SuiteSchema,
    args: &[&str],
    env: &[(&str, &str)],
) -> (Killed, SocketAddr, String) {
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_harel-jobs-cli"));
    command
        .args(["--database-url", &role.url, "--schema", q.schema.name()])
        .args(["dashboard", "--listen", "127.0.0.1:0"])
        .args(args)
        .env_remove("DATABASE_URL")
        .env_remove("HAREL_DASHBOARD_TOKEN")
        .env_remove("HAREL_DASHBOARD_BASIC_AUTH")
        .env_remove("HAREL_DASHBOARD_ALLOWED_HOSTS")
        .stderr(std::process::Stdio::piped());
    for (name, value) in env {
        command.env(name, value);
    }
    let mut child = Killed(command.spawn().unwrap());
    let mut stderr = std::io::BufReader::new(child.0.stderr.take().unwrap());
    let mut line = String::new();
    std::io::BufRead::read_line(&mut stderr, &mut line).unwrap();
    // read the rest as it comes: a closed pipe would fail the process's next line
    std::thread::spawn(move || std::io::copy(&mut stderr, &mut std::io::sink()));
    let address: SocketAddr = line
        .split("http://")
        .nth(1)
        .and_then(|rest| rest.split('/').next())
        .and_then(|a| a.parse().ok())
        .unwrap_or_else(|| panic!("no address in {line:?}"));
    (child, address, line)
}

#[tokio::test]
async fn the_command_line_dashboard_answers_only_its_own_names() {
    let q = SuiteSchema::new().await;
    let role = TestRole::with_grants(&q, OPERATOR_GRANTS).await;
    let owner = Client::with_schema(q.pool.clone(), q.schema.clone());

    // as documented: on 127.0.0.1, without authentication, nothing else said
    let (child, address, _) = start_cli_dashboard(&role, &q, &[], &[]);
    let port = address.port();
    let evil = format!("evil.example:{port}");
    let (status, response) = get_as(address, "/", &evil).await;
    assert_eq!(status, 421, "{response}");
    assert!(!response.contains("csrf"), "{response}");
    for host in [
        address.to_string(),
        format!("localhost:{port}"),
        format!("127.0.0.1:{port}"),
        format!("[::1]:{port}"),
    ] {
        let (status, response) = get_as(address, "/queues", &host).await;
        assert_eq!(status, 200, "Host {host}: {response}");
    }
    let (_, page) = get_as(address, "/queues", &address.to_string()).await;
    let pause = format!("csrf={}&name=default", csrf_of(&page));
    // the rebinding page's POST, even with the token
    let (status, response) = post_with(
        address,
        "/queues/pause",
        &evil,
        &format!("Origin: http://{evil}\r\n"),
        &pause,
    )
    .await;
    assert_eq!(status, 421, "{response}");
    assert!(!paused(&owner, "default").await);
    drop(child);

    // names of the operator's: from the environment (comma-separated), or from the flag
    // (repeatable; it replaces the environment's)
    let (_child, address, _) = start_cli_dashboard(
        &role,
        &q,
        &[],
        &[("HAREL_DASHBOARD_ALLOWED_HOSTS", "a.example, b.example:8443")],
    );
    for (host, expected) in [
        ("a.example:1234", 200),
        ("b.example:8443", 200),
        ("b.example:8444", 421),
        ("evil.example", 421),
    ] {
        let (status, response) = get_as(address, "/", host).await;
        assert_eq!(status, expected, "Host {host}: {response}");
    }
    let (_child, address, _) = start_cli_dashboard(
        &role,
        &q,
        &[
            "--allowed-host",
            "jobs.internal",
            "--allowed-host",
            "10.1.2.3:8080",
        ],
        &[],
    );
    for (host, expected) in [
        ("jobs.internal", 200),
        ("jobs.internal:80", 200),
        ("10.1.2.3:8080", 200),
        ("10.1.2.3:8081", 421),
        ("a.example", 421),
    ] {
        let (status, response) = get_as(address, "/", host).await;
        assert_eq!(status, expected, "Host {host}: {response}");
    }
}

/// The worker role reports what it likes (10,050 pools, 30 of them serving 1,000 queues of
/// 64 characters, counters at the top of BIGINT) and declares 1,000 schedules: the overview
/// answers, its size bounded, saying how many pools it does not show, and the schedules
/// page a page at a time with the total.
#[tokio::test]
async fn hostile_worker_reports_and_schedules_keep_every_page_bounded() {
    let q = SuiteSchema::new().await;
    let role = TestRole::with_grants(&q, OPERATOR_GRANTS).await;
    let operator = pool_with(&role.url, 3).await;
    let worker_role = TestRole::with_grants(&q, harel_jobs_suite::WORKER_GRANTS).await;
    let worker = pool_with(&worker_role.url, 1).await;
    for sql in [
        "SELECT @schema@.harel_worker_report(gen_random_uuid(), repeat('h', 255), n,
                names.queues, 1, 0, 9223372036854775806, 9223372036854775806,
                9223372036854775806, false)
           FROM generate_series(1, 30) AS n,
                (SELECT array_agg(lpad(i::text, 64, 'q')) AS queues
                   FROM generate_series(1, 1000) AS i) AS names",
        "SELECT @schema@.harel_worker_report(gen_random_uuid(), 'host', n, ARRAY['a'], 1, 0,
                1, 0, 0, false)
           FROM generate_series(31, 10050) AS n",
        "SELECT @schema@.harel_schedule_fire(lpad(n::text, 200, '!'), 'every 1s', NULL, now(),
                NULL, 'k', '{}', 0::smallint)
           FROM generate_series(1, 1000) AS n",
    ] {
        sqlx::raw_sql(q.sql(sql)).execute(&worker).await.unwrap();
    }
    let router = dashboard::router(Client::with_schema(operator.clone(), q.schema.clone()));
    let address = serve(router).await;
    let get = |path: &str| {
        http(
            address,
            format!("GET {path} HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\n\r\n"),
        )
    };
    let (status, overview) = get("/").await;
    assert_eq!(status, 200, "{}", &overview[..overview.len().min(2000)]);
    assert!(
        overview.len() < 512 * 1024,
        "the overview is {} bytes",
        overview.len()
    );
    assert!(
        overview.contains("id=\"workers-not-shown\""),
        "no count of the rest"
    );
    assert!(
        overview.contains("and 990 more"),
        "queue names cut with a count"
    );
    assert!(
        overview.contains("1000 schedule(s)"),
        "the schedules' total"
    );

    let (status, schedules) = get("/schedules").await;
    assert_eq!(status, 200);
    assert!(schedules.contains("1000 schedule(s) in all"), "{schedules}");
    assert!(schedules.contains("/schedules?after="), "no next page");
    assert!(schedules.len() < 512 * 1024, "{} bytes", schedules.len());
    operator.close().await;
    worker.close().await;
}

/// Runs `script` in the page and returns its value.
async fn js(client: &Browser, script: &str) -> serde_json::Value {
    client
        .execute(script, vec![])
        .await
        .unwrap_or_else(|e| panic!("{script}: {e}"))
}

/// The ids in the first column of the page's table, top to bottom, read in one script (a
/// live refresh may swap the rows between two WebDriver calls).
async fn listed_ids(client: &Browser) -> Vec<i64> {
    let ids = js(
        client,
        "return Array.from(document.querySelectorAll('tbody tr'))
                    .map(function (row) { return row.cells[0].innerText.trim(); });",
    )
    .await;
    ids.as_array()
        .expect("an array")
        .iter()
        .map(|id| {
            id.as_str()
                .and_then(|id| id.parse().ok())
                .unwrap_or_else(|| panic!("no id first: {id}"))
        })
        .collect()
}

/// Waits, without reloading, until `#live-status` says `attribute` is at least `at_least`.
async fn wait_for_live(client: &Browser, attribute: &str, at_least: i64) {
    let started = Instant::now();
    loop {
        let value = js(
            client,
            &format!(
                "return parseInt(document.getElementById('live-status')\
                 .getAttribute('{attribute}') || '0', 10);"
            ),
        )
        .await
        .as_i64()
        .unwrap_or(0);
        if value >= at_least {
            return;
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "{attribute} stayed at {value}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Fails its first `fail` attempts with "boom N: smtp 421", then succeeds; three attempts
/// at most, kept an hour once completed so its page shows it.
#[job(max_attempts = 3, retain = "1h")]
async fn flaky_mail(ctx: JobContext<()>, fail: u32) -> JobResult {
    if ctx.attempt() <= fail {
        return Err(harel_jobs::JobError::retry(format!(
            "boom {}: smtp 421",
            ctx.attempt()
        )));
    }
    Ok(())
}

/// Each attempt's cells on the job page's `#attempts` table, newest first: number, outcome,
/// start, end, took, worker, and the error's full text (its `<pre>`, else the cell's text),
/// read in one script.
async fn attempt_rows(client: &Browser) -> Vec<Vec<String>> {
    let rows = js(
        client,
        "return Array.from(document.querySelectorAll('#attempts tbody tr')).map(function (row) {
             return Array.from(row.cells).map(function (cell) {
                 var pre = cell.querySelector('pre');
                 return (pre ? pre.textContent : cell.innerText).trim();
             });
         });",
    )
    .await;
    serde_json::from_value(rows).expect("rows of cells")
}

/// The timeline's events without their times, oldest first.
async fn timeline_events(client: &Browser) -> Vec<String> {
    let events = js(
        client,
        "return Array.from(document.querySelectorAll('#timeline li')).map(function (li) {
             var time = li.querySelector('time');
             var text = li.innerText;
             return (time ? text.replace(time.innerText, '') : text.replace(/^–/, '')).trim();
         });",
    )
    .await;
    serde_json::from_value(events).expect("events")
}

/// A job that failed twice and then completed, and one that failed three times and is a
/// dead letter: each job's page has a row per attempt in `#attempts` (newest first, its
/// outcome, worker and error text) and each attempt's start and end in the timeline.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_jobs_page_shows_every_attempt_with_its_worker_and_error() {
    let (q, _role, operator, queue, owner) = operated(5).await;
    let completed = owner.enqueue(&q.pool, FlakyMail { fail: 2 }).await.unwrap();
    let dead = owner.enqueue(&q.pool, FlakyMail { fail: 9 }).await.unwrap();
    let worker = owner
        .worker(())
        .register::<FlakyMail>()
        .backoff(harel_jobs::Backoff::fixed(Duration::from_millis(10)))
        .poll_interval(Duration::from_millis(50))
        .build()
        .unwrap()
        .start();
    // both ended, and the pool listed (its host and pid name it on the pages)
    let started = Instant::now();
    loop {
        let a = owner.job(completed).await.unwrap().map(|j| j.state);
        let b = owner.job(dead).await.unwrap().map(|j| j.state);
        let listed = owner.job_attempts(dead).await.unwrap().iter().all(|a| {
            a.worker
                .as_ref()
                .is_some_and(|w| w.host.is_some() && w.pid.is_some())
        });
        if matches!(a, Some(harel_jobs::JobState::Completed { .. }))
            && matches!(b, Some(harel_jobs::JobState::Dead { .. }))
            && listed
        {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "{a:?} {b:?} listed: {listed}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let attempts = owner.job_attempts(dead).await.unwrap();
    let by = attempts[0].worker.as_ref().unwrap();
    let worker_name = format!("{} (pid {})", by.host.as_deref().unwrap(), by.pid.unwrap());

    let address = serve(dashboard::router(queue.clone())).await;
    let base = format!("http://{address}");
    let driver = ChromeDriver::start();
    let client = browser(&driver).await;

    for (id, last, last_event) in [
        (completed, "completed", "completed".to_owned()),
        (
            dead,
            "dead",
            "attempt 3 failed for good: dead: boom 3: smtp 421 (attempt 3 of 3)".to_owned(),
        ),
    ] {
        client.goto(&format!("{base}/jobs/{id}")).await.unwrap();
        assert_eq!(text(&client, "h1").await, format!("Job {id}"));
        let rows = attempt_rows(&client).await;
        assert_eq!(rows.len(), 3, "{id}: {rows:?}");
        let summary: Vec<(&str, &str, &str, &str)> = rows
            .iter()
            .map(|row| {
                (
                    row[0].as_str(),
                    row[1].as_str(),
                    row[5].as_str(),
                    row[6].as_str(),
                )
            })
            .collect();
        // the dead attempt's error as stored: the handler's, and which attempt it was
        let last_error = if last == "dead" {
            "boom 3: smtp 421 (attempt 3 of 3)"
        } else {
            "–"
        };
        assert_eq!(
            summary,
            [
                ("3", last, worker_name.as_str(), last_error),
                ("2", "failed", worker_name.as_str(), "boom 2: smtp 421"),
                ("1", "failed", worker_name.as_str(), "boom 1: smtp 421"),
            ],
            "{id}: {rows:?}"
        );
        for row in &rows {
            // started, ended (times to the second) and how long it took
            assert!(row[2].len() == 19 && row[3].len() == 19, "{row:?}");
            assert!(row[4].ends_with(" s"), "{row:?}");
        }
        let started_on = |n: u32| format!("attempt {n} started on {worker_name}");
        assert_eq!(
            timeline_events(&client).await,
            [
                "enqueued".to_owned(),
                started_on(1),
                "attempt 1 failed: boom 1: smtp 421".to_owned(),
                started_on(2),
                "attempt 2 failed: boom 2: smtp 421".to_owned(),
                started_on(3),
                last_event,
            ],
            "{id}"
        );
        screenshot(&client, &format!("job_attempts_{last}")).await;
    }
    client.close().await.unwrap();
    worker.shutdown().await.unwrap();
    operator.close().await;
}

/// The overview's chart split by queue (issue 30): a pool serving two queues runs work in
/// both, and the chart draws a series per queue, each a colour of its own, the legend
/// naming both queues, under the labelled axes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_chart_draws_a_series_per_queue_named_in_its_legend() {
    let (q, _role, _operator, queue, owner) = operated(5).await;
    for (n, lane) in ["default", "default", "mail"].into_iter().enumerate() {
        owner
            .enqueue(
                &q.pool,
                SendEmail {
                    to: format!("{n}@example.com"),
                },
            )
            .queue(lane)
            .await
            .unwrap();
    }
    let worker = owner
        .worker(())
        .register::<SendEmail>()
        .queue("default", 1)
        .queue("mail", 1)
        .poll_interval(Duration::from_millis(100))
        .report_interval(Duration::from_millis(100))
        .build()
        .unwrap()
        .start();
    let began = Instant::now();
    loop {
        let pools = owner.workers(Duration::from_secs(60), 10).await.unwrap();
        if pools.workers.iter().map(|pool| pool.succeeded).sum::<u64>() == 3 {
            break;
        }
        assert!(began.elapsed() < Duration::from_secs(60), "{pools:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    worker.shutdown().await.unwrap();

    let (_, base, client, _driver) = open(queue.clone(), |router| router).await;
    client.goto(&format!("{base}/")).await.unwrap();

    // the legend: the busiest queue first, each beside its colour's key
    let keys = client
        .find_all(Locator::Css("#chart-legend .series"))
        .await
        .unwrap();
    let mut legend = Vec::new();
    for key in keys {
        let colour = key
            .find(Locator::Css("i.key"))
            .await
            .unwrap()
            .attr("class")
            .await
            .unwrap()
            .unwrap_or_default();
        legend.push((key.text().await.unwrap().trim().to_owned(), colour));
    }
    assert_eq!(
        legend,
        [
            ("default".to_owned(), "key q0".to_owned()),
            ("mail".to_owned(), "key q1".to_owned())
        ]
    );
    // the colours differ as drawn (the stylesheet's, under the CSP), bars of both are there
    let drawn = client
        .execute(
            "return ['q0', 'q1'].map(c => getComputedStyle(document.querySelector(\
             '#chart-legend i.key.' + c)).backgroundColor);",
            vec![],
        )
        .await
        .unwrap();
    let drawn: Vec<String> = serde_json::from_value(drawn).unwrap();
    assert_ne!(drawn[0], drawn[1], "{drawn:?}");
    assert!(drawn.iter().all(|c| c != "rgba(0, 0, 0, 0)"), "{drawn:?}");
    for series in ["q0", "q1"] {
        let bars = client
            .find_all(Locator::Css(&format!(
                "figure.chart g.minute rect.{series}"
            )))
            .await
            .unwrap();
        assert!(!bars.is_empty(), "no bar of {series}");
    }
    // the tooltip of the minute names both queues' counts
    let titles = client
        .execute(
            "return Array.from(document.querySelectorAll('figure.chart g.minute title'))\
             .map(t => t.textContent).filter(t => t.includes('; '));",
            vec![],
        )
        .await
        .unwrap();
    let titles: Vec<String> = serde_json::from_value(titles).unwrap();
    let counted = titles.iter().fold((0, 0), |(d, m), title| {
        let of = |name: &str| {
            title
                .split("; ")
                .filter_map(|part| part.strip_prefix(name))
                .filter_map(|n| n.trim().parse::<u32>().ok())
                .sum::<u32>()
        };
        (d + of("default "), m + of("mail "))
    });
    assert_eq!(counted, (2, 1), "{titles:?}");
    // the axes, labelled as before
    let chart = text(&client, "figure.chart").await;
    assert!(
        chart.contains("jobs a minute") && chart.contains("minute (UTC)"),
        "{chart}"
    );
    screenshot(&client, "overview_chart_by_queue").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_three_in_the_morning_the_jobs_are_found_read_and_watched() {
    let (q, _role, operator, queue, _) = operated(5).await;

    // a long-running job of customer-7 holds its group; 4 more of it wait behind; two
    // mails in a queue of their own (its group leased too)
    let mut ids = Vec::new();
    for n in 0..5 {
        let message = OutgoingMessage::new("customer-7", "sync_crm", format!("{{\"n\":{n}}}"));
        ids.push(q.transport.publish(&q.pool, &message).await.unwrap());
    }
    let mut mails = Vec::new();
    for n in 0..2 {
        let message = OutgoingMessage::new("mail-group", "send_email", format!("{{\"n\":{n}}}"))
            .queue("mail");
        mails.push(q.transport.publish(&q.pool, &message).await.unwrap());
    }
    for lane in [None, Some("mail")] {
        let mut request = ClaimRequest::new(Duration::from_secs(3600)).limit(10);
        if let Some(name) = lane {
            request = request.queue(name);
        }
        let claimed = q.transport.claim_many(&q.pool, &request).await.unwrap();
        assert_eq!(claimed.len(), 1, "{lane:?}");
    }
    // a nightly schedule whose workers are gone (its next tick an hour late), an hourly one
    // on time
    for (name, next) in [
        ("nightly-export", "now() - interval '1 hour'"),
        ("hourly-sync", "now() + interval '1 hour'"),
    ] {
        sqlx::raw_sql(q.sql(&format!(
            "SELECT @schema@.harel_schedule_fire('{name}', 'every 3600s', NULL, {next}, NULL, \
             'k', '{{}}', 0::smallint)"
        )))
        .execute(&q.pool)
        .await
        .unwrap();
    }

    let (address, base, client, driver) = open(queue.clone(), |router| router).await;

    // the overview says why nothing is ready: 4 + 1 jobs wait behind running groups
    client.goto(&format!("{base}/")).await.unwrap();
    let oldest = text(&client, "#oldest-ready").await;
    assert!(
        oldest.contains("5 job(s) waiting behind running groups"),
        "{oldest}"
    );
    let now = text(&client, "#queue-now").await;
    assert!(
        now.contains("working") && now.contains("2 running"),
        "{now}"
    );
    assert!(now.contains("2 schedule(s), 1 stale"), "{now}");
    client.goto(&format!("{base}/schedules")).await.unwrap();
    let nightly = text_of(&client, "//tr[td[text()='nightly-export']]").await;
    assert!(nightly.contains("stale"), "{nightly}");
    let hourly = text_of(&client, "//tr[td[text()='hourly-sync']]").await;
    assert!(hourly.contains("on time"), "{hourly}");
    client.goto(&format!("{base}/")).await.unwrap();
    // the chart's axes: jobs a minute (nothing yet: a scale of 1) and the minutes
    let y = text(&client, "#chart-y").await;
    assert_eq!(y.split_whitespace().collect::<Vec<_>>(), ["1", "0.5", "0"]);
    let x = text(&client, "#chart-x").await;
    assert_eq!(x.split_whitespace().count(), 6, "{x}");
    let chart = text(&client, "figure.chart").await;
    assert!(
        chart.contains("jobs a minute") && chart.contains("minute (UTC)"),
        "{chart}"
    );

    // newest first, the queue in its own column
    client.goto(&format!("{base}/jobs")).await.unwrap();
    let mut all: Vec<i64> = ids.iter().chain(&mails).map(|id| id.get()).collect();
    all.sort_unstable_by(|a, b| b.cmp(a));
    assert_eq!(listed_ids(&client).await, all);
    let first = text(&client, "tbody tr").await;
    assert!(first.contains("send_email mail mail-group"), "{first}");
    assert!(
        text(&client, "#jobs-shown")
            .await
            .contains("Newest first: 7 shown; no older matching job."),
    );
    // oldest first on request
    client
        .find(Locator::Id("filter-order"))
        .await
        .unwrap()
        .select_by_value("oldest")
        .await
        .unwrap();
    click(&client, Locator::Id("filter-apply")).await;
    wait_for_url(&client, "order=oldest").await;
    all.reverse();
    assert_eq!(listed_ids(&client).await, all);
    // by queue, and by group
    client.goto(&format!("{base}/jobs")).await.unwrap();
    client
        .find(Locator::Id("filter-queue"))
        .await
        .unwrap()
        .send_keys("mail")
        .await
        .unwrap();
    click(&client, Locator::Id("filter-apply")).await;
    wait_for_url(&client, "queue=mail").await;
    let mut expected: Vec<i64> = mails.iter().map(|id| id.get()).collect();
    expected.reverse();
    assert_eq!(listed_ids(&client).await, expected);
    client
        .goto(&format!("{base}/jobs?group=customer-7&kind=sync_crm"))
        .await
        .unwrap();
    assert_eq!(listed_ids(&client).await.len(), 5);
    screenshot(&client, "jobs_by_group").await;

    // the search box: a job's page, or "not found"
    client.goto(&format!("{base}/jobs")).await.unwrap();
    client
        .find(Locator::Id("search-id"))
        .await
        .unwrap()
        .send_keys(&mails[0].to_string())
        .await
        .unwrap();
    click(&client, Locator::Id("search-go")).await;
    wait_for_url(&client, &format!("/jobs/{}", mails[0])).await;
    assert_eq!(text(&client, "h1").await, format!("Job {}", mails[0]));
    let fields = text(&client, ".fields").await;
    assert!(fields.contains("Queue\nmail"), "{fields}");
    client.goto(&format!("{base}/jobs")).await.unwrap();
    client
        .find(Locator::Id("search-id"))
        .await
        .unwrap()
        .send_keys("987654321")
        .await
        .unwrap();
    click(&client, Locator::Id("search-go")).await;
    wait_for_url(&client, "id=987654321").await;
    assert!(
        text(&client, "#search-result")
            .await
            .contains("No job 987654321")
    );
    let (status, _) = get_as(address, "/jobs?id=987654321", &address.to_string()).await;
    assert_eq!(status, 404);

    // Run now: a report scheduled for an hour from now, due at once after a confirmation
    let report = q
        .transport
        .publish(
            &q.pool,
            &OutgoingMessage::new("unused", "build_report", "{}")
                .in_own_group()
                .delay(Duration::from_secs(3600)),
        )
        .await
        .unwrap();
    client.goto(&format!("{base}/jobs/{report}")).await.unwrap();
    assert!(text(&client, ".fields").await.contains("scheduled"));
    click(&client, Locator::XPath("//button[text()='Run now']")).await;
    let question = client.get_alert_text().await.expect("asks first");
    assert!(
        question.starts_with(&format!("Run job {report} now rather than at ")),
        "{question}"
    );
    client.accept_alert().await.unwrap();
    wait_for_url(&client, "done=run_now").await;
    assert!(text(&client, ".notice").await.contains("Due now"));
    assert!(text(&client, ".fields").await.contains("waiting"));
    assert_eq!(
        queue.job(report).await.unwrap().unwrap().state,
        harel_jobs::JobState::Waiting
    );
    // a waiting job has no such button
    assert!(
        client
            .find(Locator::XPath("//button[text()='Run now']"))
            .await
            .is_err()
    );
    screenshot(&client, "job_run_now").await;

    // live: a job enqueued after the page loaded shows up on top without a reload
    client.goto(&format!("{base}/jobs")).await.unwrap();
    let later = q
        .transport
        .publish(
            &q.pool,
            &OutgoingMessage::new("late", "build_report", "{}").queue("mail"),
        )
        .await
        .unwrap();
    let started = Instant::now();
    while listed_ids(&client).await.first() != Some(&later.get()) {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "{later} never appeared"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // paused while the reader types: a job enqueued meanwhile waits until they stop
    click(&client, Locator::Id("search-id")).await;
    wait_for_live(&client, "data-paused-ticks", 1).await;
    let quiet = q
        .transport
        .publish(
            &q.pool,
            &OutgoingMessage::new("quiet", "build_report", "{}").queue("mail"),
        )
        .await
        .unwrap();
    let paused = js(
        &client,
        "return parseInt(document.getElementById('live-status').getAttribute('data-paused-ticks'), 10);",
    )
    .await
    .as_i64()
    .unwrap();
    wait_for_live(&client, "data-paused-ticks", paused + 2).await;
    assert_eq!(listed_ids(&client).await.first(), Some(&later.get()));
    js(&client, "document.activeElement.blur(); return null;").await;
    let started = Instant::now();
    while listed_ids(&client).await.first() != Some(&quiet.get()) {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "{quiet} never appeared"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    // 400 px wide: no page is wider than the window (tables scroll in their own box)
    // a dead letter for its page, and a tenant's job for the queue's keys page
    let letter = dead_letter(&q, "someone-with-a-long-address@example.com", "smtp: 550").await;
    let tenant = OutgoingMessage::new("tenant-group", "sync_crm", "{}")
        .fair_key("tenant-with-a-rather-long-name-0000000000000000000042");
    q.transport.publish(&q.pool, &tenant).await.unwrap();
    client.set_window_size(400, 900).await.unwrap();
    for path in [
        "/".to_owned(),
        "/jobs".to_owned(),
        format!("/jobs/{}", ids[1]),
        "/queues".to_owned(),
        "/queues/keys?name=default".to_owned(),
        "/groups".to_owned(),
        "/dead".to_owned(),
        format!("/dead/{letter}"),
        "/schedules".to_owned(),
        "/workflows".to_owned(),
    ] {
        client.goto(&format!("{base}{path}")).await.unwrap();
        let widths = js(
            &client,
            "return [document.documentElement.scrollWidth, window.innerWidth];",
        )
        .await;
        let (scroll, window) = (widths[0].as_i64().unwrap(), widths[1].as_i64().unwrap());
        assert!(window <= 400, "the window is {window} px wide");
        assert!(scroll <= window, "{path}: {scroll} px wide in {window}");
        // and no column header is broken inside a word (the table scrolls in its box
        // rather than squeezing "Weight" into a letter a line)
        let broken = js(
            &client,
            "var measure = document.createElement('canvas').getContext('2d');
             return Array.from(document.querySelectorAll('th')).filter(function (th) {
                 var style = getComputedStyle(th);
                 measure.font = style.font;
                 var room = th.clientWidth - parseFloat(style.paddingLeft)
                     - parseFloat(style.paddingRight);
                 return th.innerText.split(/\\s+/).some(function (word) {
                     return measure.measureText(word).width > room + 0.5;
                 });
             }).map(function (th) { return th.innerText; });",
        )
        .await;
        assert_eq!(
            broken,
            serde_json::json!([]),
            "{path}: headers broken in a word"
        );
        let name = format!("narrow{}", path.replace(['/', '?', '='], "_"));
        screenshot(&client, &name).await;
    }
    client.close().await.unwrap();

    // the dark scheme follows the system's
    let mut capabilities = ChromeDriver::capabilities();
    capabilities["goog:chromeOptions"]["args"]
        .as_array_mut()
        .unwrap()
        .push("--blink-settings=preferredColorScheme=0".into());
    let dark = ClientBuilder::new(hyper_util::client::legacy::connect::HttpConnector::new())
        .capabilities(capabilities)
        .connect(&driver.url)
        .await
        .expect("a Chromium session");
    dark.goto(&format!("{base}/jobs")).await.unwrap();
    let scheme = js(
        &dark,
        "return [window.matchMedia('(prefers-color-scheme: dark)').matches, \
         getComputedStyle(document.documentElement).backgroundColor];",
    )
    .await;
    assert_eq!(scheme[0], true, "{scheme}");
    assert_eq!(scheme[1], "rgb(18, 21, 28)", "{scheme}");
    screenshot(&dark, "jobs_dark").await;
    dark.close().await.unwrap();
    operator.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dead_letters_are_retried_and_deleted_by_filter_in_batches() {
    let (q, _role, operator, queue, _) = operated(5).await;
    let first = dead_letter(&q, "a@example.com", "smtp: 421").await;
    let second = dead_letter(&q, "b@example.com", "smtp: 421").await;
    // last month's 2,500 reports: more than two batches of 1,000
    sqlx::raw_sql(q.sql(
        "INSERT INTO @schema@.dead_letters (id, group_id, kind, payload, priority, attempts,
                                            last_error, enqueued_at)
         SELECT 1000000 + n, 'own:' || lpad((1000000 + n)::text, 19, '0'), 'old_report', '{}',
                2, 1, 'gone', now()
           FROM generate_series(1, 2500) AS n",
    ))
    .execute(&q.pool)
    .await
    .unwrap();
    let dead = queue.dead_letters();
    assert_eq!(dead.count().await.unwrap(), 2502);

    let (_, base, client, _driver) = open(queue.clone(), |router| router).await;

    // the jobs page, newest first, 50 a page, saying what it does not show
    client
        .goto(&format!("{base}/jobs?state=dead&kind=old_report"))
        .await
        .unwrap();
    let ids = listed_ids(&client).await;
    assert_eq!((ids.len(), ids[0]), (50, 1_002_500));
    let shown = text(&client, "#jobs-shown").await;
    assert!(
        shown.contains("Newest first, at most 50 a page: 50 shown; older matching jobs"),
        "{shown}"
    );
    click(&client, Locator::Id("next-page")).await;
    wait_for_url(&client, "after=").await;
    assert_eq!(listed_ids(&client).await[0], 1_002_450);
    let first_page = client
        .find(Locator::Id("first-page"))
        .await
        .unwrap()
        .attr("href")
        .await
        .unwrap();
    assert_eq!(
        first_page.as_deref(),
        Some("/jobs?state=dead&kind=old_report")
    );

    // delete every report, not only the 50 shown, after a confirmation with the count
    client
        .goto(&format!("{base}/dead?kind=old_report"))
        .await
        .unwrap();
    assert_eq!(
        client
            .find_all(Locator::Css("tbody tr"))
            .await
            .unwrap()
            .len(),
        50
    );
    let count = text(&client, "#matching-count").await;
    assert!(
        count.contains("2500 dead letter(s) of kind old_report"),
        "{count}"
    );
    // a report enqueued long ago (a low id) dies after the count: not one the operator saw
    sqlx::raw_sql(q.sql(
        "INSERT INTO @schema@.dead_letters (id, group_id, kind, payload, priority, attempts,
                                            last_error, enqueued_at, failed_at)
         VALUES (500000, 'own:0000000000000500000', 'old_report', '{}', 2, 1, 'late',
                 now() - interval '1 day', clock_timestamp() + interval '1 second')",
    ))
    .execute(&q.pool)
    .await
    .unwrap();
    click(&client, Locator::Id("delete-all")).await;
    let question = client.get_alert_text().await.expect("asks first");
    assert_eq!(
        question,
        "Delete 2500 dead letter(s) of kind old_report for good?"
    );
    client.accept_alert().await.unwrap();
    wait_for_url(&client, "done=deleted").await;
    assert!(
        text(&client, ".notice")
            .await
            .contains("Deleted 2500 dead letter(s).")
    );
    screenshot(&client, "dead_all_deleted").await;
    assert_eq!(
        dead.count().await.unwrap(),
        3,
        "the mails are left, and the report that died after the count"
    );
    assert!(dead.get(JobId::new(500_000)).await.unwrap().is_some());
    dead.delete(JobId::new(500_000)).await.unwrap();

    // then every kind: the two mails go back in the queue
    client.goto(&format!("{base}/dead")).await.unwrap();
    assert!(
        text(&client, "#matching-count")
            .await
            .contains("2 dead letter(s) of every kind")
    );
    click(&client, Locator::Id("retry-all")).await;
    client.accept_alert().await.unwrap();
    wait_for_url(&client, "done=retried").await;
    assert!(
        text(&client, ".notice")
            .await
            .contains("Put 2 dead letter(s) back in the queue.")
    );
    assert_eq!(dead.count().await.unwrap(), 0);
    for id in [first, second] {
        assert!(dead.get(id).await.unwrap().is_none());
    }
    let queued = queue
        .jobs(&harel_jobs::JobQuery::new().state(harel_jobs::StateFilter::Queued))
        .await
        .unwrap();
    assert_eq!(queued.jobs.len(), 2);
    client.close().await.unwrap();
    operator.close().await;
}

/// "Cancel all matching" on the Jobs page: every job its filter matches that has not ended
/// (not only the page shown), counted on a page of its own, confirmed with the count, in
/// batches (2,501 jobs: three reads of 1,000), each with the reason given; a running one is
/// told to stop; jobs outside the filter, and one enqueued after the count, are left alone.
/// A finished state offers nothing to cancel; the POST needs the CSRF token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jobs_are_cancelled_by_filter_in_batches() {
    let (q, _role, operator, queue, _) = operated(5).await;
    // two reports in the default queue, and 2,501 in a queue of their own, the first of
    // them running
    let mut mails = Vec::new();
    for to in ["a", "b"] {
        let message = OutgoingMessage::new("unused", "old_report", format!("{{\"to\":\"{to}\"}}"))
            .in_own_group();
        mails.push(q.transport.publish(&q.pool, &message).await.unwrap());
    }
    let report = || {
        OutgoingMessage::new("unused", "old_report", "{}")
            .in_own_group()
            .queue("reports")
    };
    let running = q.transport.publish(&q.pool, &report()).await.unwrap();
    let claimed = q
        .transport
        .claim_many(
            &q.pool,
            &ClaimRequest::new(Duration::from_secs(3600)).queue("reports"),
        )
        .await
        .unwrap();
    assert_eq!(claimed[0].lease.id, running);
    for _ in 0..5 {
        let batch: Vec<OutgoingMessage> = (0..500).map(|_| report()).collect();
        q.transport.publish_many(&q.pool, &batch).await.unwrap();
    }
    let reports = harel_jobs::JobQuery::new()
        .state(harel_jobs::StateFilter::Queued)
        .queue("reports")
        .limit(1000);

    let (address, base, client, _driver) = open(queue.clone(), |router| router).await;

    // a finished state: nothing to cancel, no button (and its page says no)
    client
        .goto(&format!("{base}/jobs?state=completed"))
        .await
        .unwrap();
    assert!(client.find(Locator::Id("cancel-all")).await.is_err());
    let (status, _) = get_as(address, "/jobs/cancel-all?state=dead", &address.to_string()).await;
    assert_eq!(status, 400);

    // the reports of the queue: counted on their own page, then confirmed with the count
    client
        .goto(&format!("{base}/jobs?kind=old_report&queue=reports"))
        .await
        .unwrap();
    assert_eq!(listed_ids(&client).await.len(), 50);
    screenshot(&client, "jobs_with_cancel_all").await;
    click(&client, Locator::Id("cancel-all")).await;
    wait_for_url(&client, "/jobs/cancel-all?").await;
    let count = text(&client, "#cancel-count").await;
    assert!(
        count
            .starts_with("2501 job(s) match (not yet ended, of kind old_report, in queue reports)")
            && count.contains("1 of them running"),
        "{count}"
    );
    screenshot(&client, "jobs_cancel_all").await;
    // a report enqueued after the count: not one the operator saw
    let late = q.transport.publish(&q.pool, &report()).await.unwrap();
    client
        .find(Locator::Id("cancel-reason"))
        .await
        .unwrap()
        .send_keys("reports retired")
        .await
        .unwrap();
    click(&client, Locator::Id("cancel-all-confirm")).await;
    let question = client.get_alert_text().await.expect("asks first");
    assert_eq!(
        question,
        "Cancel 2501 job(s) (not yet ended, of kind old_report, in queue reports)?"
    );
    client.accept_alert().await.unwrap();
    wait_for_url(&client, "done=cancelled_all").await;
    let notice = text(&client, ".notice").await;
    assert!(notice.contains("Cancelled 2501 job(s)"), "{notice}");
    let url = client.current_url().await.unwrap();
    assert_eq!(
        url.query(),
        Some("done=cancelled_all&n=2501&kind=old_report&queue=reports")
    );
    screenshot(&client, "jobs_cancelled_all").await;

    // left: the running report, told to stop (with the reason), and the late one; and the
    // default queue's two
    let left = queue.jobs(&reports).await.unwrap().jobs;
    let ids: Vec<JobId> = left.iter().map(|job| job.id).collect();
    assert_eq!(ids, [running, late]);
    assert!(matches!(
        left[0].state,
        harel_jobs::JobState::Running {
            cancel_requested: true,
            ..
        }
    ));
    assert_eq!(left[0].cancel_reason.as_deref(), Some("reports retired"));
    let cancelled = queue
        .jobs(
            &harel_jobs::JobQuery::new()
                .state(harel_jobs::StateFilter::Cancelled)
                .limit(1000),
        )
        .await
        .unwrap();
    assert_eq!(cancelled.jobs.len(), 1000);
    let mut total = cancelled.jobs.len();
    let mut next = cancelled.next;
    while let Some(after) = next {
        let page = queue
            .jobs(
                &harel_jobs::JobQuery::new()
                    .state(harel_jobs::StateFilter::Cancelled)
                    .limit(1000)
                    .after(after),
            )
            .await
            .unwrap();
        total += page.jobs.len();
        next = page.next;
    }
    assert_eq!(total, 2500, "every queued report of the count");
    match &cancelled.jobs[0].state {
        harel_jobs::JobState::Cancelled { reason, .. } => {
            assert_eq!(reason.as_deref(), Some("reports retired"))
        }
        other => panic!("{other:?}"),
    }
    for mail in mails {
        assert_eq!(
            queue.job(mail).await.unwrap().unwrap().state,
            harel_jobs::JobState::Waiting
        );
    }

    // the POST needs the page's CSRF token
    let (status, body) = post(
        address,
        "/jobs/cancel-all",
        &format!("queue=reports&upto={late}"),
    )
    .await;
    assert_eq!(status, 403, "{body}");
    assert_eq!(queue.jobs(&reports).await.unwrap().jobs.len(), 2);
    // nothing left to count: no form
    client
        .goto(&format!(
            "{base}/jobs/cancel-all?state=waiting&queue=nosuchqueue"
        ))
        .await
        .unwrap();
    assert!(
        text(&client, "#cancel-count")
            .await
            .contains("No job matches (waiting, in queue nosuchqueue): nothing to cancel.")
    );
    assert!(
        client
            .find(Locator::Id("cancel-all-confirm"))
            .await
            .is_err()
    );
    client.close().await.unwrap();
    operator.close().await;
}

/// The hidden fields of `page`'s form that posts to `action`, as a form body (their values
/// are plain: ids, names, the CSRF token).
fn hidden_fields(page: &str, action: &str) -> String {
    let form = page
        .split("<form")
        .find(|form| form.contains(&format!("action=\"{action}\"")))
        .unwrap_or_else(|| panic!("no form posting to {action} in {page}"));
    let form = form.split("</form>").next().unwrap();
    form.split("<input type=\"hidden\" name=\"")
        .skip(1)
        .map(|input| {
            let (name, rest) = input.split_once("\" value=\"").unwrap();
            format!("{name}={}", rest.split('"').next().unwrap())
        })
        .collect::<Vec<_>>()
        .join("&")
}

/// "Cancel all matching" over the jobs of queue `bulk`: its count page, then the click the
/// page's form posts; answers the page and the click's response.
async fn count_and_cancel_bulk(address: SocketAddr) -> (String, (u16, String)) {
    let (status, page) = get_as(address, "/jobs/cancel-all?queue=bulk", &address.to_string()).await;
    assert_eq!(status, 200, "{page}");
    let click = post(
        address,
        "/jobs/cancel-all",
        &hidden_fields(&page, "/jobs/cancel-all"),
    )
    .await;
    (page, click)
}

/// More jobs match than one click cancels (10,000): the count says "at least", the click
/// cancels the 10,000 counted and says that more match; the next count finds the rest.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_all_matching_stops_at_its_cap_and_says_more_match() {
    let (q, _role, operator, queue, _) = operated(5).await;
    let job = || {
        OutgoingMessage::new("unused", "old_report", "{}")
            .in_own_group()
            .queue("bulk")
    };
    for _ in 0..20 {
        let batch: Vec<OutgoingMessage> = (0..500).map(|_| job()).collect();
        q.transport.publish_many(&q.pool, &batch).await.unwrap();
    }
    let last = q.transport.publish(&q.pool, &job()).await.unwrap();
    let address = serve(dashboard::router(queue.clone())).await;
    let queued = harel_jobs::JobQuery::new()
        .state(harel_jobs::StateFilter::Queued)
        .queue("bulk")
        .limit(10);

    let (page, (status, response)) = count_and_cancel_bulk(address).await;
    assert!(page.contains("at least 10000 job(s) match"), "{page}");
    assert_eq!(status, 303, "{response}");
    assert!(
        response.contains("location: /jobs?done=cancelled_all_more&n=10000&queue=bulk\r\n"),
        "{response}"
    );
    let left: Vec<JobId> = queue
        .jobs(&queued)
        .await
        .unwrap()
        .jobs
        .iter()
        .map(|j| j.id)
        .collect();
    assert_eq!(left, [last]);
    let (_, notice) = get_as(
        address,
        "/jobs?done=cancelled_all_more&n=10000&queue=bulk",
        &address.to_string(),
    )
    .await;
    assert!(
        notice.contains("more match: do it again for the rest"),
        "{notice}"
    );

    // counted again: the one left, and this time no more
    let (page, (status, response)) = count_and_cancel_bulk(address).await;
    assert!(page.contains(">1 job(s) match"), "{page}");
    assert_eq!(status, 303, "{response}");
    assert!(
        response.contains("location: /jobs?done=cancelled_all&n=1&queue=bulk\r\n"),
        "{response}"
    );
    assert!(queue.jobs(&queued).await.unwrap().jobs.is_empty());
    operator.close().await;
}

/// An operator role granted before this release (no EXECUTE on harel_job_attempts, on
/// harel_list_jobs_newest nor on harel_job_workflow) still gets the jobs list (oldest first) and a job's page
/// (without its attempts), each saying which grant is missing, not an error.
#[tokio::test]
async fn a_role_granted_by_the_previous_release_still_sees_jobs_and_their_pages() {
    let q = SuiteSchema::new().await;
    let grants: Vec<&str> = OPERATOR_GRANTS
        .iter()
        .copied()
        .filter(|g| {
            !g.contains("harel_job_attempts")
                && !g.contains("harel_list_jobs_newest")
                && !g.contains("harel_job_workflow")
        })
        .collect();
    assert_eq!(grants.len() + 3, OPERATOR_GRANTS.len());
    let role = TestRole::with_grants(&q, &grants).await;
    let operator = pool_with(&role.url, 2).await;
    let queue = Client::with_schema(operator.clone(), q.schema.clone());
    let id = dead_letter(&q, "a@example.com", "smtp: 421").await;
    let router = dashboard::router_with(queue, DashboardConfig::new().read_only(true));
    let address = serve(router).await;
    let get = |path: String| {
        http(
            address,
            format!("GET {path} HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\n\r\n"),
        )
    };
    let (status, page) = get("/jobs".to_owned()).await;
    assert_eq!(status, 200, "{page}");
    assert!(
        page.contains("id=\"missing-grant\"") && page.contains("harel_list_jobs_newest"),
        "{page}"
    );
    assert!(page.contains(&format!("/jobs/{id}")), "{page}");
    let (status, page) = get(format!("/jobs/{id}")).await;
    assert_eq!(status, 200, "{page}");
    assert!(
        page.contains("id=\"missing-grant\"") && page.contains("harel_job_attempts"),
        "{page}"
    );
    // nor which workflow task a job is (harel_job_workflow, schema version 20)
    assert!(page.contains("EXECUTE on harel_job_workflow"), "{page}");
    let (status, page) = get(format!("/dead/{id}")).await;
    assert_eq!(status, 200, "{page}");
    assert!(page.contains("EXECUTE on harel_job_workflow"), "{page}");
}

/// An operator pauses, resumes and triggers a schedule from the Schedules page, each
/// confirmed first; the page shows it paused, and a trigger waiting. Unknown names are
/// refused (404), and so is a trigger of a paused schedule (409). Read-only: no buttons,
/// and the POSTs are refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_pauses_resumes_and_triggers_a_schedule_in_the_browser() {
    let (q, _role, operator, queue, owner) = operated(3).await;
    // declared by a worker (no worker runs: the trigger waits)
    sqlx::raw_sql(q.sql(
        "SELECT @schema@.harel_schedule_fire('nightly-export', 'every 3600s', NULL, \
         now() + interval '1 hour', NULL, 'k', '{}', 0::smallint)",
    ))
    .execute(&q.pool)
    .await
    .unwrap();
    let nightly = || async {
        owner
            .schedules(&harel_jobs::ScheduleQuery::new())
            .await
            .unwrap()
            .schedules
            .remove(0)
    };

    let (address, base, client, _driver) = open(queue.clone(), |router| router).await;
    let ours = address.to_string();

    client.goto(&format!("{base}/schedules")).await.unwrap();
    let row = "//tr[td[text()='nightly-export']]";
    click(
        &client,
        Locator::XPath(&format!("{row}//button[text()='Pause']")),
    )
    .await;
    let question = client.get_alert_text().await.expect("asks first");
    assert!(question.contains("nightly-export"), "{question}");
    client.accept_alert().await.unwrap();
    wait_for_url(&client, "done=schedule_paused").await;
    assert!(text(&client, ".notice").await.contains("Paused"));
    let paused_row = text_of(&client, row).await;
    assert!(paused_row.contains("paused since"), "{paused_row}");
    assert!(!paused_row.contains("Trigger now"), "{paused_row}");
    assert!(nightly().await.paused_at.is_some());
    screenshot(&client, "schedules_paused").await;

    // a trigger of the paused schedule, and unknown names, with the page's token
    let (_, page) = get_as(address, "/schedules", &ours).await;
    let csrf = csrf_of(&page);
    let origin = format!("Origin: http://{ours}\r\n");
    let (status, body) = post_with(
        address,
        "/schedules/trigger",
        &ours,
        &origin,
        &format!("csrf={csrf}&name=nightly-export"),
    )
    .await;
    assert_eq!(status, 409, "{body}");
    assert_eq!(nightly().await.trigger_requested_at, None);
    for action in ["pause", "resume", "trigger"] {
        let (status, body) = post_with(
            address,
            &format!("/schedules/{action}"),
            &ours,
            &origin,
            &format!("csrf={csrf}&name=nope"),
        )
        .await;
        assert_eq!(status, 404, "{action}: {body}");
    }
    assert_eq!(
        owner
            .schedules(&harel_jobs::ScheduleQuery::new())
            .await
            .unwrap()
            .total,
        1,
        "nothing created"
    );

    click(
        &client,
        Locator::XPath(&format!("{row}//button[text()='Resume']")),
    )
    .await;
    client.accept_alert().await.unwrap();
    wait_for_url(&client, "done=schedule_resumed").await;
    assert!(text_of(&client, row).await.contains("on time"));
    assert_eq!(nightly().await.paused_at, None);

    click(
        &client,
        Locator::XPath(&format!("{row}//button[text()='Trigger now']")),
    )
    .await;
    let question = client.get_alert_text().await.expect("asks first");
    assert!(question.contains("now"), "{question}");
    client.accept_alert().await.unwrap();
    wait_for_url(&client, "done=schedule_triggered").await;
    let triggered_row = text_of(&client, row).await;
    assert!(triggered_row.contains("triggered at"), "{triggered_row}");
    assert!(nightly().await.trigger_requested_at.is_some());
    screenshot(&client, "schedules").await;
    client.close().await.unwrap();

    // read-only: the page has no buttons, and the POSTs are refused
    let read_only = dashboard::router_with(queue.clone(), DashboardConfig::new().read_only(true));
    let address = serve(read_only).await;
    let (status, page) = http(
        address,
        format!("GET /schedules HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\n\r\n"),
    )
    .await;
    assert_eq!(status, 200, "{page}");
    assert!(
        page.contains("nightly-export") && !page.contains("<button"),
        "{page}"
    );
    let (status, body) = post(address, "/schedules/pause", "name=nightly-export").await;
    assert_eq!(status, 403, "{body}");
    assert_eq!(nightly().await.paused_at, None);
    operator.close().await;
}

/// How many of the queue's jobs are cancelled and how many still queued, by queue name:
/// `(cancelled, queued)`, read as the owner.
async fn cancelled_and_queued(q: &SuiteSchema, queue: &str) -> (i64, i64) {
    sqlx::query_as(q.sql(
        "SELECT (SELECT count(*) FROM @schema@.job_history
                  WHERE queue = $1 AND state = 'cancelled'),
                (SELECT count(*) FROM @schema@.transport_groups g
                   JOIN @schema@.queues s ON s.id = g.queue_id
                  WHERE s.name = $1)",
    ))
    .bind(queue)
    .fetch_one(&q.pool)
    .await
    .unwrap()
}

/// Issue 42, item 11 (RELIABILITY.md, "Hardening III", row 11): 250,000 queued jobs of
/// queue `busy`, then 20,000 of queue `retired`. "Cancel all matching" on `retired` used to
/// say "No job matches …: nothing to cancel" (its 100 reads ended before the first match).
/// Now its count says where it stopped looking and counts on from there; the click starts
/// where the count's first match was, so it cancels what was counted; nothing of `busy` is
/// touched. The Jobs page reads on and says where it stopped looking too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_all_matching_reaches_a_queue_behind_another_queues_jobs() {
    let (q, _role, operator, queue, _) = operated(5).await;
    let (first, last) = q.bury_matches_behind_others(250_000).await;
    let (address, base, client, _driver) = open(queue.clone(), |router| router).await;

    // newest first, the queue's newest at once; oldest first, the page says where it
    // stopped looking, and never that nothing matches
    client
        .goto(&format!("{base}/jobs?queue=retired"))
        .await
        .unwrap();
    assert_eq!(listed_ids(&client).await[0], last.get());
    client
        .goto(&format!("{base}/jobs?queue=retired&order=oldest"))
        .await
        .unwrap();
    let shown = text(&client, "#jobs-shown").await;
    assert!(shown.contains("this page stopped looking at id"), "{shown}");

    // the count: it stops looking before the first match, says where, and counts on
    client
        .goto(&format!("{base}/jobs?queue=retired"))
        .await
        .unwrap();
    click(&client, Locator::Id("cancel-all")).await;
    wait_for_url(&client, "/jobs/cancel-all?").await;
    let count = text(&client, "#cancel-count").await;
    eprintln!("the count: {count}");
    assert!(
        count.starts_with("No job matches (not yet ended, in queue retired) up to id ")
            && count.ends_with("; the count stopped there."),
        "{count}"
    );
    screenshot(&client, "jobs_cancel_all_stopped_looking").await;
    click(&client, Locator::Id("count-on")).await;
    wait_for_url(&client, "after=").await;
    let count = text(&client, "#cancel-count").await;
    eprintln!("counted on: {count}");
    let ids = format!("ids {first} to {}", first.get() + 9_999);
    assert!(
        count
            .starts_with("at least 10000 job(s) match (not yet ended, in queue retired) after id ")
            && count.contains(&ids),
        "{count}"
    );
    screenshot(&client, "jobs_cancel_all_counted_on").await;
    click(&client, Locator::Id("cancel-all-confirm")).await;
    client.accept_alert().await.unwrap();
    wait_for_url(&client, "done=cancelled_all_more").await;
    let url = client.current_url().await.unwrap();
    assert_eq!(
        url.query(),
        Some("done=cancelled_all_more&n=10000&queue=retired")
    );
    assert_eq!(cancelled_and_queued(&q, "retired").await, (10_000, 10_000));

    // the rest, counted on from where the first count stopped: exactly what is left
    let (status, page) = get_as(
        address,
        &format!("/jobs/cancel-all?queue=retired&after={}", first.get() - 1),
        &address.to_string(),
    )
    .await;
    assert_eq!(status, 200, "{page}");
    assert!(page.contains(">10000 job(s) match"), "{page}");
    let (status, response) = post(
        address,
        "/jobs/cancel-all",
        &hidden_fields(&page, "/jobs/cancel-all"),
    )
    .await;
    assert_eq!(status, 303, "{response}");
    assert!(
        response.contains("location: /jobs?done=cancelled_all&n=10000&queue=retired\r\n"),
        "{response}"
    );
    assert_eq!(cancelled_and_queued(&q, "retired").await, (20_000, 0));
    assert_eq!(cancelled_and_queued(&q, "busy").await, (0, 250_000));
    client.close().await.unwrap();
    operator.close().await;
}
