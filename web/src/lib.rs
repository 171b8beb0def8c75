//! The redjob web dashboard: every queue, job, dead letter, periodic schedule
//! and live worker, and the actions an operator needs on them, as an axum
//! [`Router`] to mount in your own app under any path.
//!
//! ```no_run
//! use axum::Router;
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let client = redjob::Client::connect("redis://127.0.0.1:6379").await?;
//! let app: Router = Router::new().nest("/jobs", redjob_web::router(client));
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:8080").await?;
//! axum::serve(listener, app).await?;
//! # Ok(()) }
//! ```
//!
//! The pages are rendered on the server (maud templates, checked at compile
//! time, every value escaped); a small script refreshes the live parts and
//! draws nothing the page cannot show without it. The assets are compiled in:
//! the dashboard works offline.
//!
//! The overview is the mount point itself (`/jobs` above; axum's `nest` does
//! not serve `/jobs/`).
//!
//! Actions are POSTed forms carrying a CSRF token that must match the
//! dashboard's `SameSite=Strict` cookie, and a cross-site `Origin` is refused.
//! [`Dashboard::read_only`] shows everything and refuses every action.
//!
//! Who may look and act: [`Dashboard::resolve_user`] gives each request a
//! [`User`] with full or read-only access (or refuses it), and their actions
//! are recorded under their name and logged; [`Dashboard::token`] asks every
//! request for a token. Or authentication stays your app's: put the dashboard
//! behind its middleware (your session, or basic auth as here) like any other
//! route.
//!
//! ```
//! use axum::extract::Request;
//! use axum::http::{StatusCode, header};
//! use axum::middleware::{self, Next};
//! use axum::response::{IntoResponse, Response};
//! use tower::ServiceExt;
//!
//! /// Lets in "admin" with password "secret" (keep real ones out of the code).
//! async fn basic_auth(req: Request, next: Next) -> Response {
//!     let expected = "Basic YWRtaW46c2VjcmV0"; // base64 of "admin:secret"
//!     match req.headers().get(header::AUTHORIZATION) {
//!         Some(v) if v == expected => next.run(req).await,
//!         _ => (
//!             StatusCode::UNAUTHORIZED,
//!             [(header::WWW_AUTHENTICATE, r#"Basic realm="redjob""#)],
//!         )
//!             .into_response(),
//!     }
//! }
//!
//! # #[tokio::main(flavor = "current_thread")] async fn main() {
//! let client = redjob::Client::memory(Default::default());
//! let dashboard = redjob_web::router(client).layer(middleware::from_fn(basic_auth));
//! let app = axum::Router::new().nest("/jobs", dashboard);
//!
//! let get = |auth: Option<&str>| {
//!     let mut req = Request::get("/jobs");
//!     if let Some(a) = auth {
//!         req = req.header(header::AUTHORIZATION, a);
//!     }
//!     app.clone().oneshot(req.body(axum::body::Body::empty()).unwrap())
//! };
//! assert_eq!(get(None).await.unwrap().status(), StatusCode::UNAUTHORIZED);
//! let ok = get(Some("Basic YWRtaW46c2VjcmV0")).await.unwrap();
//! assert_eq!(ok.status(), StatusCode::OK);
//! # }
//! ```

mod access;
mod actions;
mod assets;
mod chart;
mod ctx;
mod error;
mod error_page;
mod fmt;
mod layout;
mod pages;
mod params;

pub use access::{Access, User};

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::routing::{get, post};
use redjob::Client;
use redjob::inspect::Inspect;

pub(crate) use ctx::Ctx;

/// The dashboard's settings; [`router`](Dashboard::router) builds its routes.
///
/// ```
/// use std::time::Duration;
///
/// let client = redjob::Client::memory(Default::default());
/// let routes: axum::Router = redjob_web::Dashboard::new(client)
///     .read_only(true)
///     .page_size(100)
///     .refresh(Duration::from_secs(10))
///     .router();
/// ```
#[derive(Clone)]
pub struct Dashboard {
    client: Client,
    read_only: bool,
    /// The app's resolver of users; `None`: every request may act (unless
    /// read-only).
    resolver: Option<access::Resolver>,
    /// The dashboard's own token (`redjob web`); `None`: none asked for.
    token: Option<String>,
    page_size: usize,
    refresh: Duration,
    /// Host names (lowercase, no port) the dashboard answers to; empty: any.
    hosts: Vec<String>,
}

impl Dashboard {
    /// A dashboard of the queues `client` reaches (its namespace). Its
    /// actions are recorded in the queues' history as `dashboard`, unless
    /// `client` acts as someone already ([`Client::acting_as`], say
    /// `dashboard alice` from your own access control).
    pub fn new(client: Client) -> Self {
        let client = match client.actor() {
            "api" => client.acting_as("dashboard"),
            _ => client,
        };
        Dashboard {
            client,
            read_only: false,
            resolver: None,
            token: None,
            page_size: 50,
            refresh: Duration::from_secs(5),
            hosts: Vec::new(),
        }
    }

    /// Answers only requests whose `Host` header names one of `hosts` (a
    /// port is ignored); others get 403. A dashboard served on its own, e.g.
    /// on loopback, needs it against DNS rebinding (a page on another site
    /// making its name resolve to 127.0.0.1); `redjob web` sets it. Default:
    /// any host (the app's own routing and authentication decide).
    ///
    /// ```
    /// let client = redjob::Client::memory(Default::default());
    /// let routes: axum::Router = redjob_web::Dashboard::new(client)
    ///     .allowed_hosts(["localhost", "127.0.0.1", "jobs.example.com"])
    ///     .router();
    /// ```
    pub fn allowed_hosts<I, S>(mut self, hosts: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        self.hosts = hosts
            .into_iter()
            .map(|h| ctx::host_name(h.as_ref()))
            .collect();
        self
    }

    /// Shows everything and refuses every action (no buttons, and a POST gets
    /// 403). Default: false.
    pub fn read_only(mut self, on: bool) -> Self {
        self.read_only = on;
        self
    }

    /// Resolves each request's user (`None`: refused, 403), with full or
    /// read-only access, as Oban Web does: typically from what your app's
    /// authentication put in the request's extensions or headers. A user's
    /// actions are recorded in the queues' history as `dashboard <name>` and
    /// logged (a `tracing` event at info level, target
    /// `redjob_web::actions`: the user, the method, the path, the status). A
    /// read-only user sees no buttons, and a POST of theirs gets 403.
    /// Default: none (every request may act, unless
    /// [`read_only`](Dashboard::read_only)).
    ///
    /// ```
    /// use redjob_web::{Dashboard, User};
    ///
    /// let client = redjob::Client::memory(Default::default());
    /// let app = Dashboard::new(client)
    ///     .resolve_user(|req| {
    ///         // what your authentication middleware decided, e.g. a header
    ///         // a trusted proxy sets
    ///         match req.headers.get("x-user")?.to_str().ok()? {
    ///             "alice" => Some(User::full("alice")),
    ///             other => Some(User::read_only(other)),
    ///         }
    ///     })
    ///     .router();
    /// # let _ = app;
    /// ```
    pub fn resolve_user<F>(mut self, resolver: F) -> Self
    where
        F: Fn(&axum::http::request::Parts) -> Option<User> + Send + Sync + 'static,
    {
        self.resolver = Some(Arc::new(resolver));
        self
    }

    /// Asks every request for `token` (HTTP Basic, any user name and the
    /// token as the password, which a browser prompts for; or `Authorization:
    /// Bearer <token>`): without it, 401. The Basic user name is the actor of
    /// the requests' actions. `redjob web` sets it from `REDJOB_WEB_TOKEN` or
    /// `--token-file`. Serve it over TLS (a proxy) beyond loopback: Basic
    /// sends the token in the clear. Default: none.
    pub fn token(mut self, token: impl Into<String>) -> Self {
        self.token = Some(token.into()).filter(|t: &String| !t.is_empty());
        self
    }

    /// Jobs per page in lists, 1 to 1000. Default: 50.
    pub fn page_size(mut self, n: usize) -> Self {
        self.page_size = n.clamp(1, redjob::inspect::MAX_PAGE);
        self
    }

    /// How often open pages refresh their figures and lists;
    /// [`Duration::ZERO`] turns the live refresh off. Default: 5 s.
    pub fn refresh(mut self, every: Duration) -> Self {
        self.refresh = every;
        self
    }

    /// The dashboard's routes, to serve or to [`nest`](Router::nest) in an app.
    pub fn router(self) -> Router {
        let app = Arc::new(self);
        let router = Router::new()
            .route("/", get(pages::overview::page))
            .route("/queues", post(actions::create_queue))
            .route("/queues/{queue}", get(pages::queue::page))
            .route("/find", get(pages::job::find))
            .route(
                "/queues/{queue}/purge",
                get(pages::queue::confirm_purge).post(actions::purge),
            )
            .route("/queues/{queue}/jobs/{id}", get(pages::job::page))
            .route("/queues/{queue}/dead", get(pages::dead::page))
            .route("/queues/{queue}/dead/confirm", get(pages::dead::confirm))
            .route("/topics", get(pages::topics::list))
            .route("/topics/{topic}", get(pages::topics::topic))
            .route("/topics/{topic}/{sub}/dead", get(pages::topics::dead))
            .route(
                "/topics/{topic}/{sub}/dead/confirm",
                get(pages::topics::confirm),
            )
            .route(
                "/topics/{topic}/{sub}/rewind",
                get(pages::topics::rewind).post(actions::rewind),
            )
            .route(
                "/topics/{topic}/{sub}/dead/{action}",
                post(actions::topic_dead),
            )
            .route("/batches", get(pages::batches::list))
            .route("/batches/{id}", get(pages::batches::page))
            .route("/batches/{id}/cancel", post(actions::batch_cancel))
            .route("/periodic", get(pages::live::periodic))
            .route("/workers", get(pages::live::workers))
            .route("/queues/{queue}/{action}", post(actions::queue))
            .route("/queues/{queue}/jobs/{id}/{action}", post(actions::job))
            .route("/queues/{queue}/dead/{action}", post(actions::dead))
            .route("/periodic/{action}", post(actions::periodic))
            .route("/workers/{action}", post(actions::worker))
            .route("/assets/{file}", get(assets::serve))
            .fallback(error_page::no_route)
            .layer(axum::middleware::from_fn_with_state(
                app.clone(),
                access::resolve,
            ))
            .layer(axum::middleware::from_fn_with_state(
                app.clone(),
                error_page::in_layout,
            ));
        // the host guard outside the error pages: a host refused gets a bare
        // page, and no cookie
        let router = if app.hosts.is_empty() {
            router
        } else {
            router.layer(axum::middleware::from_fn_with_state(
                app.clone(),
                ctx::guard_host,
            ))
        };
        router.with_state(app)
    }
}

/// The dashboard of the queues `client` reaches, with the default settings
/// ([`Dashboard::new`]).
///
/// ```
/// let client = redjob::Client::memory(Default::default());
/// let app = axum::Router::new().nest("/jobs", redjob_web::router(client));
/// ```
pub fn router(client: Client) -> Router {
    Dashboard::new(client).router()
}
