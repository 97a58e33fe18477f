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

/// `ferrox serve --help`'s default port and the Dockerfile's agree; returns it.
fn serving_port() -> i64 {
    let docker = std::fs::read_to_string(root().join("Dockerfile")).unwrap();
    assert!(docker.contains("FERROX_PORT=8080"), "the image's port");
    assert!(docker.contains("EXPOSE 8080"), "the image's exposed port");
    assert!(docker.contains("USER 10001"), "the image's user");
    8080
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
