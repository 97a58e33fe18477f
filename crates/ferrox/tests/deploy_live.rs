//! The shipped deployment, run the way it runs: the built binary started with exactly the
//! environment and entrypoint of the `Dockerfile`'s final stage, and for a pod, with the
//! arguments and environment of `deploy/kubernetes/ferrox.yaml`'s container on top — both read
//! from those files, never restated here. Then the test sends what reaches a pod: kubelet's
//! probes and a gateway's health checks (`Host` = the pod's IP and port), requests through the
//! Service (`Host` = its DNS name), with and without the API key the manifest requires.
//!
//! Each server runs in a network namespace of its own with its own address (a veth pair, made
//! by the test and removed after), so the pod's address is real: the server binds the image's
//! `0.0.0.0:8080` and the requests cross an interface to reach it. Where namespaces cannot be
//! made (not root, no `ip`), the server runs on loopback and the same `Host` values are sent
//! to it, which is what the server's check reads; the test says so on stderr.
//!
//! Only what names a place on the build machine is replaced: the model cache (`/models` in the
//! image) becomes a folder holding the test's model, and the port becomes a free one when
//! there is no namespace to own 8080.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use yaml_rust2::{Yaml, YamlLoader};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The final stage of the Dockerfile: its `ENV` pairs and its `ENTRYPOINT`.
struct Image {
    env: Vec<(String, String)>,
    entrypoint: Vec<String>,
}

fn image() -> Image {
    let text = std::fs::read_to_string(root().join("Dockerfile")).unwrap();
    // Instructions, with continuation lines joined and comments dropped.
    let mut instructions = Vec::new();
    let mut current = String::new();
    for line in text.lines() {
        let line = line.trim();
        if line.starts_with('#') || (line.is_empty() && current.is_empty()) {
            continue;
        }
        match line.strip_suffix('\\') {
            Some(part) => current.push_str(part),
            None => {
                current.push_str(line);
                instructions.push(std::mem::take(&mut current));
            }
        }
    }
    let last_from = instructions
        .iter()
        .rposition(|i| i.starts_with("FROM "))
        .expect("a FROM");
    let mut image = Image {
        env: Vec::new(),
        entrypoint: Vec::new(),
    };
    for instruction in &instructions[last_from..] {
        if let Some(pairs) = instruction.strip_prefix("ENV ") {
            for pair in pairs.split_whitespace() {
                let (k, v) = pair.split_once('=').expect("ENV KEY=VALUE");
                image
                    .env
                    .push((k.to_string(), v.trim_matches('"').to_string()));
            }
        } else if let Some(json) = instruction.strip_prefix("ENTRYPOINT ") {
            image.entrypoint = serde_json::from_str(json).expect("ENTRYPOINT in exec form");
        }
    }
    assert_eq!(
        image.entrypoint.first().map(String::as_str),
        Some("ferrox"),
        "the image runs ferrox"
    );
    image
}

/// The ferrox container of the manifest's Deployment: its arguments and its environment,
/// with each secret reference given `secret`.
fn pod_container(secret: &str) -> (Vec<String>, Vec<(String, String)>) {
    let text = std::fs::read_to_string(root().join("deploy/kubernetes/ferrox.yaml")).unwrap();
    let docs = YamlLoader::load_from_str(&text).unwrap();
    let deploy = docs
        .iter()
        .find(|d| d["kind"].as_str() == Some("Deployment"))
        .expect("a Deployment");
    let container = &deploy["spec"]["template"]["spec"]["containers"][0];
    let args = container["args"].as_vec().map_or_else(Vec::new, |a| {
        a.iter().map(|y| text_of(y).to_string()).collect()
    });
    let env = container["env"].as_vec().map_or_else(Vec::new, |vars| {
        vars.iter()
            .map(|var| {
                let name = text_of(&var["name"]).to_string();
                let value = match &var["value"] {
                    Yaml::BadValue => {
                        assert!(
                            !var["valueFrom"]["secretKeyRef"].is_badvalue(),
                            "{name}: only secrets are supported here"
                        );
                        secret.to_string()
                    }
                    v => text_of(v).to_string(),
                };
                (name, value)
            })
            .collect()
    });
    (args, env)
}

fn text_of(y: &Yaml) -> &str {
    y.as_str().unwrap_or_else(|| panic!("not a string: {y:?}"))
}

/// A running server, in its own network namespace when it can have one.
struct Pod {
    child: Child,
    /// Where requests connect: the pod's address, or loopback.
    connect: String,
    /// The pod's `IP:port`, as kubelet's probes send it in `Host`.
    pod_host: String,
    log: PathBuf,
    netns: Option<Netns>,
    _cache: TempDir,
}

/// A network namespace with one veth pair: the host side gets `.1`, the pod side `.2`.
struct Netns {
    name: String,
    host_link: String,
    pod_ip: String,
}

static PODS: AtomicU32 = AtomicU32::new(0);

fn ip_command() -> Option<PathBuf> {
    ["/usr/sbin/ip", "/sbin/ip", "/usr/bin/ip", "/bin/ip"]
        .into_iter()
        .map(PathBuf::from)
        .find(|p| p.exists())
}

impl Netns {
    /// Namespace `n` of this test process.
    fn create(n: u32) -> Result<Netns, String> {
        let ip = ip_command().ok_or("no `ip` command")?;
        let pid = std::process::id();
        // 198.18.0.0/15 is set aside for benchmarking (RFC 2544), so no real network of the
        // host is shadowed; a /30 per pod, distinct per process and per pod.
        let subnet = (pid % 256, 4 * (n % 64));
        let ns = Netns {
            name: format!("ferrox-pod-{pid}-{n}"),
            host_link: format!("fxh{}{n}", pid % 1_000_000),
            pod_ip: format!("198.18.{}.{}", subnet.0, subnet.1 + 2),
        };
        let host_ip = format!("198.18.{}.{}", subnet.0, subnet.1 + 1);
        let pod_link = ns.host_link.replacen("fxh", "fxp", 1);
        let steps: [&[&str]; 9] = [
            &["netns", "add", &ns.name],
            &[
                "link",
                "add",
                &ns.host_link,
                "type",
                "veth",
                "peer",
                "name",
                &pod_link,
            ],
            &["link", "set", &pod_link, "netns", &ns.name],
            &[
                "addr",
                "add",
                &format!("{host_ip}/30"),
                "dev",
                &ns.host_link,
            ],
            &["link", "set", &ns.host_link, "up"],
            &[
                "-n",
                &ns.name,
                "addr",
                "add",
                &format!("{}/30", ns.pod_ip),
                "dev",
                &pod_link,
            ],
            &["-n", &ns.name, "link", "set", &pod_link, "up"],
            &["-n", &ns.name, "link", "set", "lo", "up"],
            // A sandbox may let the namespace be made but not entered: then no namespace.
            &["netns", "exec", &ns.name, "true"],
        ];
        let mut failed = None;
        for step in steps {
            let out = Command::new(&ip).args(step).output();
            match out {
                Ok(out) if out.status.success() => {}
                // What was made so far goes with `ns`.
                Ok(out) => {
                    let why = String::from_utf8_lossy(&out.stderr);
                    failed = Some(format!("ip {step:?}: {why}"));
                    break;
                }
                Err(e) => {
                    failed = Some(format!("ip: {e}"));
                    break;
                }
            }
        }
        match failed {
            Some(why) => Err(why),
            None => Ok(ns),
        }
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        if let Some(ip) = ip_command() {
            let _ = Command::new(&ip)
                .args(["link", "del", &self.host_link])
                .output();
            let _ = Command::new(&ip)
                .args(["netns", "del", &self.name])
                .output();
        }
    }
}

struct TempDir(PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

impl Pod {
    /// Starts `ferrox` with `args` after the image's entrypoint and with exactly `env` (the
    /// image's, then the pod's) on top of a bare `PATH` and `HOME`.
    fn start(model: &Path, args: &[String], env: &[(String, String)]) -> Pod {
        let image = image();
        let n = PODS.fetch_add(1, Ordering::Relaxed);
        let cache =
            TempDir(std::env::temp_dir().join(format!("ferrox-deploy-{}-{n}", std::process::id())));
        std::fs::create_dir_all(cache.0.join("models")).unwrap();
        // The image's model volume, holding the test's model.
        std::os::unix::fs::symlink(
            model,
            cache
                .0
                .join("models")
                .join(ferrox_engine::cache::DEFAULT_MODEL_FILE),
        )
        .unwrap();
        let mut env: Vec<(String, String)> = env.to_vec();
        // The last setting of a variable is the one the process sees.
        let place = |env: &mut Vec<(String, String)>, key: &str, value: String| {
            let slot = env.iter_mut().rev().find(|(k, _)| k == key);
            slot.unwrap_or_else(|| panic!("the image sets no {key}")).1 = value;
        };
        place(&mut env, "FERROX_CACHE_DIR", cache.0.display().to_string());
        let port = || {
            env.iter()
                .rev()
                .find(|(k, _)| k == "FERROX_PORT")
                .map(|(_, v)| v.clone())
        };
        let image_port = port().expect("the image sets FERROX_PORT");
        let netns = Netns::create(n)
            .map_err(|why| eprintln!("NOTE: no network namespace ({why}): the pod's address is sent as Host on loopback"))
            .ok();
        let (connect, pod_host) = match &netns {
            Some(ns) => (
                format!("{}:{image_port}", ns.pod_ip),
                format!("{}:{image_port}", ns.pod_ip),
            ),
            None => {
                let free = std::net::TcpListener::bind("127.0.0.1:0")
                    .unwrap()
                    .local_addr()
                    .unwrap()
                    .port();
                place(&mut env, "FERROX_PORT", free.to_string());
                (
                    format!("127.0.0.1:{free}"),
                    format!("10.244.1.7:{image_port}"),
                )
            }
        };
        let log = cache.0.join("server.log");
        let mut command = match &netns {
            Some(ns) => {
                let mut c = Command::new(ip_command().unwrap());
                c.args(["netns", "exec", &ns.name]);
                c.arg(env!("CARGO_BIN_EXE_ferrox"));
                c
            }
            None => Command::new(env!("CARGO_BIN_EXE_ferrox")),
        };
        command
            .args(&image.entrypoint[1..])
            .args(args)
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("HOME", std::env::var_os("HOME").unwrap_or_default())
            .env("RUST_LOG", "info")
            .envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap());
        let child = command.spawn().expect("ferrox starts");
        let mut pod = Pod {
            child,
            connect,
            pod_host,
            log,
            netns,
            _cache: cache,
        };
        pod.wait_ready();
        pod
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Waits for kubelet's readiness probe to pass. While the model loads `/health` is 503;
    /// any other answer (a 403 for the pod's own address) fails at once.
    fn wait_ready(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(180);
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!(
                    "ferrox exited before it was ready ({status}):\n{}",
                    self.log()
                );
            }
            if let Some((status, body)) = self.probe() {
                match status {
                    200 => return,
                    503 => {}
                    _ => panic!("kubelet's probe got {status}: {body}\n{}", self.log()),
                }
            }
            assert!(
                Instant::now() < deadline,
                "not ready in 180 s:\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// What kubelet sends for an `httpGet` probe on `/health`.
    fn probe(&self) -> Option<(u16, String)> {
        self.send(
            "GET",
            "/health",
            &self.pod_host,
            &["User-Agent: kube-probe/1.31", "Accept: */*"],
            None,
        )
    }

    /// One HTTP/1.1 request with `Host: host`; `None` if the connection fails.
    fn send(
        &self,
        method: &str,
        path: &str,
        host: &str,
        headers: &[&str],
        body: Option<&str>,
    ) -> Option<(u16, String)> {
        let mut stream = TcpStream::connect(&self.connect).ok()?;
        stream
            .set_read_timeout(Some(Duration::from_secs(120)))
            .unwrap();
        let mut request =
            format!("{method} {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n");
        for h in headers {
            request.push_str(&format!("{h}\r\n"));
        }
        if let Some(body) = body {
            request.push_str(&format!(
                "Content-Type: application/json\r\nContent-Length: {}\r\n",
                body.len()
            ));
        }
        request.push_str("\r\n");
        request.push_str(body.unwrap_or(""));
        stream.write_all(request.as_bytes()).ok()?;
        let mut response = String::new();
        stream.read_to_string(&mut response).ok()?;
        let status = response.split_whitespace().nth(1)?.parse().ok()?;
        let body = response
            .split_once("\r\n\r\n")
            .map_or("", |(_, b)| b)
            .to_string();
        Some((status, body))
    }

    fn expect(
        &self,
        (method, path, host): (&str, &str, &str),
        headers: &[&str],
        body: Option<&str>,
        status: u16,
    ) -> String {
        let (got, text) = self
            .send(method, path, host, headers, body)
            .unwrap_or_else(|| panic!("{method} {path} (Host {host}): no answer"));
        assert_eq!(
            got,
            status,
            "{method} {path} with Host {host} and {headers:?}: {text}\n{}",
            self.log()
        );
        text
    }
}

impl Drop for Pod {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        // The namespace goes only once the process in it is gone.
        self.netns.take();
    }
}

fn model() -> Option<PathBuf> {
    ferrox_engine::cache::model_for_tests().map(|p| std::fs::canonicalize(p).unwrap())
}

const CHAT: &str =
    r#"{"messages":[{"role":"user","content":"Say hi."}],"max_tokens":4,"temperature":0}"#;

/// Kubernetes' names for the manifest's Service, as a gateway or another pod sends them.
const SERVICE_HOSTS: [&str; 2] = ["ferrox:8080", "ferrox.default.svc.cluster.local:8080"];

#[test]
fn the_manifests_pod_serves_its_probes_gateway_and_clients() {
    let Some(model) = model() else { return };
    let key = "sk-deploy-test-key";
    let (args, pod_env) = pod_container(key);
    let mut env = image().env;
    env.extend(pod_env);
    let pod = Pod::start(&model, &args, &env);
    let auth = format!("Authorization: Bearer {key}");
    let pod_host = pod.pod_host.clone();
    for host in [pod_host.as_str()].into_iter().chain(SERVICE_HOSTS) {
        // Probes and health checks carry no key.
        pod.expect(("GET", "/health", host), &[], None, 200);
        // The scraper has none either (the manifest's annotations point it at /metrics).
        let metrics = pod.expect(("GET", "/metrics", host), &[], None, 200);
        assert!(metrics.contains("ferrox_"), "{metrics}");
        // Everything else needs the key, and with it is served.
        pod.expect(("GET", "/v1/models", host), &[], None, 401);
        let models = pod.expect(("GET", "/v1/models", host), &[&auth], None, 200);
        for arg in args.windows(2).filter(|w| w[0] == "--alias") {
            assert!(models.contains(&format!("\"{}\"", arg[1])), "{models}");
        }
        let reply = pod.expect(
            ("POST", "/v1/chat/completions", host),
            &[&auth],
            Some(CHAT),
            200,
        );
        assert!(reply.contains("\"choices\""), "{reply}");
    }
    let log = pod.log();
    assert!(
        log.contains("every client that can reach this address")
            && log.contains("any Host")
            && log.contains("every route but /health and /metrics needs one"),
        "the start-up log says what it serves:\n{log}"
    );
    assert!(!log.contains(key), "the key must never be logged:\n{log}");
}

#[test]
fn the_image_alone_serves_remote_clients_and_says_it_is_open() {
    let Some(model) = model() else { return };
    let pod = Pod::start(&model, &[], &image().env);
    let pod_host = pod.pod_host.clone();
    for host in [pod_host.as_str()].into_iter().chain(SERVICE_HOSTS) {
        pod.expect(("GET", "/health", host), &[], None, 200);
        let reply = pod.expect(("POST", "/v1/chat/completions", host), &[], Some(CHAT), 200);
        assert!(reply.contains("\"choices\""), "{reply}");
    }
    let log = pod.log();
    assert!(
        log.contains("every client that can reach this address")
            && log.contains("any Host")
            && log.contains("no API key: every route is open")
            && log.contains("without an API key"),
        "a bind to 0.0.0.0 without a key says what it serves:\n{log}"
    );
}
