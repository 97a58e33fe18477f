//! The deployment files, checked offline: `deploy/kubernetes/*.yaml` parse, and the fields
//! that must agree across them, the Dockerfile and ferrox itself do — ports, probe paths,
//! labels and selectors, the user the container runs as, the gateway's discovery.

use std::path::PathBuf;

use yaml_rust2::{Yaml, YamlLoader};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn manifests(file: &str) -> Vec<Yaml> {
    let path = root().join("deploy/kubernetes").join(file);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{file}: {e}"));
    YamlLoader::load_from_str(&text).unwrap_or_else(|e| panic!("{file}: {e}"))
}

fn kind<'a>(docs: &'a [Yaml], kind: &str) -> &'a Yaml {
    docs.iter()
        .find(|d| d["kind"].as_str() == Some(kind))
        .unwrap_or_else(|| panic!("no {kind}"))
}

fn s(y: &Yaml) -> &str {
    y.as_str().unwrap_or_else(|| panic!("not a string: {y:?}"))
}

fn n(y: &Yaml) -> i64 {
    y.as_i64().unwrap_or_else(|| panic!("not a number: {y:?}"))
}

/// The port the image serves on: `ferrox serve --help`'s default, the Dockerfile's
/// `FERROX_PORT` and its `EXPOSE` must all say the same; returns it.
fn serving_port() -> i64 {
    let help = std::process::Command::new(env!("CARGO_BIN_EXE_ferrox"))
        .args(["serve", "--help"])
        .env_remove("FERROX_PORT")
        .output()
        .expect("ferrox starts");
    let help = String::from_utf8_lossy(&help.stdout);
    let port_flag = help
        .split("--port")
        .nth(1)
        .unwrap_or_else(|| panic!("no --port in ferrox serve --help:\n{help}"));
    let default: i64 = port_flag
        .split("[default: ")
        .nth(1)
        .and_then(|rest| rest.split(']').next())
        .and_then(|d| d.parse().ok())
        .unwrap_or_else(|| panic!("no default for --port:\n{help}"));
    let docker = std::fs::read_to_string(root().join("Dockerfile")).unwrap();
    let port = |word: Option<&str>, what: &str| -> i64 {
        let word = word.unwrap_or_else(|| panic!("no {what} in the Dockerfile"));
        word.trim()
            .parse()
            .unwrap_or_else(|_| panic!("{what} {word:?} is not a port"))
    };
    let env_port = docker
        .split_whitespace()
        .find_map(|w| w.strip_prefix("FERROX_PORT="));
    let exposed = docker
        .lines()
        .find_map(|l| l.trim().strip_prefix("EXPOSE "));
    assert_eq!(port(env_port, "FERROX_PORT"), default, "the image's port");
    assert_eq!(port(exposed, "EXPOSE"), default, "the image's exposed port");
    assert!(docker.contains("USER 10001"), "the image's user");
    default
}

#[test]
fn the_replicas_service_and_probes_agree() {
    let port = serving_port();
    let docs = manifests("ferrox.yaml");
    let deploy = kind(&docs, "Deployment");
    let pod = &deploy["spec"]["template"];
    let labels = &pod["metadata"]["labels"];
    assert_eq!(deploy["spec"]["selector"]["matchLabels"], *labels);
    let container = &pod["spec"]["containers"][0];
    let ports = container["ports"].as_vec().unwrap();
    assert_eq!(n(&ports[0]["containerPort"]), port);
    let port_name = s(&ports[0]["name"]);
    for probe in ["readinessProbe", "livenessProbe"] {
        let get = &container[probe]["httpGet"];
        assert_eq!(s(&get["path"]), "/health", "{probe}");
        assert_eq!(s(&get["port"]), port_name, "{probe}");
    }
    assert_eq!(n(&pod["spec"]["securityContext"]["runAsUser"]), 10001);
    let annotations = &pod["metadata"]["annotations"];
    assert_eq!(s(&annotations["prometheus.io/port"]), port.to_string());
    assert_eq!(s(&annotations["prometheus.io/path"]), "/metrics");
    // The scraper has no key: /metrics must be public.
    let args: Vec<&str> = container["args"].as_vec().unwrap().iter().map(s).collect();
    assert!(args.contains(&"--metrics-public"), "{args:?}");
    // The shutdown grace (10 s by default) fits the termination grace period.
    let grace = ferrox_server::DEFAULT_SHUTDOWN_GRACE.as_secs() as i64;
    let pre_stop = &container["lifecycle"]["preStop"]["exec"]["command"];
    assert_eq!(s(&pre_stop[0]), "sleep");
    let wait: i64 = s(&pre_stop[1]).parse().unwrap();
    // The pre-stop wait, then the drain: both inside the termination grace period.
    assert!(n(&pod["spec"]["terminationGracePeriodSeconds"]) > wait + grace);
    let service = kind(&docs, "Service");
    assert_eq!(service["spec"]["selector"], *labels);
    assert_eq!(s(&service["spec"]["ports"][0]["targetPort"]), port_name);
}

#[test]
fn the_gateway_discovers_the_replicas() {
    let port = serving_port();
    let replicas = manifests("ferrox.yaml");
    let labels = &kind(&replicas, "Deployment")["spec"]["template"]["metadata"]["labels"];
    let docs = manifests("gateway.yaml");
    let deploy = kind(&docs, "Deployment");
    let pod = &deploy["spec"]["template"];
    assert_eq!(
        deploy["spec"]["selector"]["matchLabels"],
        pod["metadata"]["labels"]
    );
    let container = &pod["spec"]["containers"][0];
    let command = s(&container["args"][0]);
    let words: Vec<&str> = command.split_whitespace().collect();
    let after = |flag: &str| {
        let at = words.iter().position(|w| *w == flag);
        words[at.unwrap_or_else(|| panic!("no {flag} in {command}")) + 1]
    };
    // The selector names the replicas' label.
    let (key, value) = after("--selector").split_once('=').unwrap();
    assert_eq!(s(&labels[key]), value);
    assert_eq!(after("--service-discovery-port"), port.to_string());
    assert_eq!(after("--policy"), "cache_aware");
    let listen = after("--port");
    assert_eq!(
        n(&container["ports"][0]["containerPort"]).to_string(),
        listen
    );
    // It registers a pod by reading its /v1/models, which needs the replicas' key: the
    // same Secret, passed to smg.
    assert!(command.contains("--api-key"), "{command}");
    let secret_of = |container: &Yaml| {
        container["env"]
            .as_vec()
            .unwrap()
            .iter()
            .find(|v| s(&v["name"]) == "FERROX_API_KEY")
            .map(|v| v["valueFrom"]["secretKeyRef"].clone())
            .expect("FERROX_API_KEY")
    };
    let replica = &kind(&replicas, "Deployment")["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(secret_of(container), secret_of(replica));
    // It may watch pods, and that is all.
    let role = kind(&docs, "Role");
    let rule = &role["rules"][0];
    assert_eq!(s(&rule["resources"][0]), "pods");
    let verbs: Vec<&str> = rule["verbs"].as_vec().unwrap().iter().map(s).collect();
    assert_eq!(verbs, ["get", "list", "watch"]);
    let binding = kind(&docs, "RoleBinding");
    assert_eq!(binding["roleRef"]["name"], role["metadata"]["name"]);
    let account = kind(&docs, "ServiceAccount");
    assert_eq!(binding["subjects"][0]["name"], account["metadata"]["name"]);
    assert_eq!(
        pod["spec"]["serviceAccountName"],
        account["metadata"]["name"]
    );
    let service = kind(&docs, "Service");
    assert_eq!(service["spec"]["selector"], pod["metadata"]["labels"]);
}

#[test]
fn the_inference_pool_selects_the_replicas() {
    let port = serving_port();
    let replicas = manifests("ferrox.yaml");
    let labels = &kind(&replicas, "Deployment")["spec"]["template"]["metadata"]["labels"];
    let docs = manifests("inferencepool.yaml");
    let pool = kind(&docs, "InferencePool");
    assert_eq!(pool["spec"]["selector"]["matchLabels"], *labels);
    assert_eq!(n(&pool["spec"]["targetPorts"][0]["number"]), port);
}
