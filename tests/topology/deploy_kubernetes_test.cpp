// topology/deploy: the StatefulSets a topology becomes, the topology its pods read, the objects'
// contents that make the deployment work (names, addresses, probes, drains, memory, scaling),
// the refusals of what pods cannot run, and the YAML they are written in.
#define BOOST_TEST_MODULE deploy_kubernetes
#include <boost/test/unit_test.hpp>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "runtime/common/error.h"
#include "topology/deploy/kubernetes.h"
#include "topology/deploy/yaml_writer.h"
#include "topology/topology.h"

using namespace troupe;
using namespace troupe::topology;
using nlohmann::json;

namespace {

std::string config_text(const std::string& name) {
  std::ifstream in(std::string(TROUPE_SOURCE_DIR) + "/configs/" + name);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

deploy::kubernetes_secrets secrets() {
  deploy::kubernetes_secrets s;
  s.cluster_token = "0123456789abcdef0123456789abcdef";
  s.api_key = "api-key-3f9c2b7e";
  s.tls_certificate = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n";
  s.tls_key = "-----BEGIN PRIVATE KEY-----\nMIGH\n-----END PRIVATE KEY-----\n";
  s.admin_server_secret = std::string(40, 's');
  s.admin_server_public = std::string(40, 'S');
  s.admin_client_secret = std::string(40, 'c');
  s.admin_client_public = "rq:rM>}U?@Lns47E1%kR.o@n%FcmmsL/@{H8]yf7";
  return s;
}

struct deployed {
  topology_config topo;
  std::vector<deploy::manifest> objects;
  const json& named(const std::string& kind, const std::string& name) const {
    for (const auto& m : objects)
      if (m.object["kind"] == kind && m.object["metadata"]["name"] == name) return m.object;
    BOOST_FAIL("no " << kind << " " << name);
    static json none;
    return none;
  }
  // The topology the pods read, parsed as troupe serve and troupe node parse it.
  topology_config pod_topology() const {
    return parse_topology(named("ConfigMap", "troupe-topology")["data"]["topology.toml"].get<std::string>(), "pod.toml");
  }
};

deployed deploy_config(const std::string& name, deploy::kubernetes_options o = {}) {
  const std::string text = config_text(name);
  deployed d{parse_topology(text, "configs/" + name), {}};
  o.weight_bytes[""] = std::uint64_t(100) << 20;
  d.objects = deploy::kubernetes_manifests(d.topo, text, o, secrets());
  return d;
}

std::string refusal(const std::string& text) {
  try {
    const auto t = parse_topology(text, "t.toml");
    deploy::kubernetes_manifests(t, text, {}, secrets());
  } catch (const input_error& e) {
    return e.what();
  }
  BOOST_FAIL("deployed: " << text);
  return {};
}

const std::string two_nodes = R"(
[model]
path = "models/kjv"
[[nodes]]
name = "head"
address = "127.0.0.1:7700"
[[nodes]]
name = "a"
[[nodes]]
name = "b"
[[pools]]
name = "main"
replicas = 2
nodes = ["a", "b"]
)";

const json& container_of(const json& sts) { return sts["spec"]["template"]["spec"]["containers"][0]; }

}  // namespace

BOOST_AUTO_TEST_CASE(every_process_becomes_a_pod_named_in_the_topology_it_reads) {
  const auto d = deploy_config("two-heads.toml");
  const auto pods = d.pod_topology();
  std::vector<std::string> names;
  for (const auto& n : pods.nodes) names.push_back(n.name);
  BOOST_TEST(names == (std::vector<std::string>{"troupe-head-0", "troupe-head-1", "troupe-main-0", "troupe-main-1"}),
             boost::test_tools::per_element());
  BOOST_TEST(pods.heads().size() == 2u);
  for (const auto& n : pods.nodes) BOOST_TEST(n.host == n.name + ".troupe-cluster.default.svc.cluster.local");
  BOOST_TEST(pods.heads()[0]->port == deploy::registry_port);
  BOOST_TEST(pods.pools[0].nodes == (std::vector<std::string>{"troupe-main-0", "troupe-main-1"}), boost::test_tools::per_element());
  // Off loopback: TLS between pods, the admin endpoint behind CURVE with the hooks' key let in,
  // and the token from the Secret rather than a file of this machine.
  BOOST_TEST(pods.cluster.tls());
  BOOST_TEST(pods.cluster.token_file.empty());
  BOOST_TEST(pods.admin.curve());
  BOOST_TEST(pods.admin.endpoint == "tcp://0.0.0.0:7600");
  BOOST_TEST(pods.admin.authorized_keys.back() == secrets().admin_client_public);
  BOOST_TEST(pods.model.path == "/models/kjv");
  BOOST_TEST(pods.frontend.host == "0.0.0.0");
  // Each StatefulSet runs the same command in every pod: its name from the pod's.
  const json& heads = d.named("StatefulSet", "troupe-head");
  BOOST_TEST(heads["spec"]["replicas"] == 2);
  BOOST_TEST(heads["spec"]["serviceName"] == "troupe-cluster");
  const json args = container_of(heads)["args"];
  BOOST_TEST(args[0] == "serve");
  BOOST_TEST(args.dump().find("\"--name\",\"$(POD_NAME)\"") != std::string::npos, args.dump());
  BOOST_TEST(container_of(d.named("StatefulSet", "troupe-main"))["args"][0] == "node");
}

BOOST_AUTO_TEST_CASE(the_prestop_hook_drains_each_pods_own_replicas_within_its_grace) {
  const auto d = deploy_config("two-heads.toml");
  const json& sts = d.named("StatefulSet", "troupe-main");
  const std::string script = container_of(sts)["lifecycle"]["preStop"]["exec"]["command"][2];
  // The pod's replicas and the heads come from files of the config volume, chosen by the pod's name.
  const json& data = d.named("ConfigMap", "troupe-topology")["data"];
  BOOST_TEST(data["drain.troupe-main-0"] == "main-0\n");
  BOOST_TEST(data["drain.troupe-main-1"] == "main-1\n");
  BOOST_TEST(data.dump().find("main-2") == std::string::npos);  // a stopped slot holds nothing
  // Both heads are tried in turn.
  BOOST_TEST(data["drain.heads"] == "troupe-head-0.troupe-cluster.default.svc.cluster.local\ntroupe-head-1.troupe-cluster.default.svc.cluster.local\n");
  BOOST_TEST(script.find("/etc/troupe/config/drain/\"$POD_NAME\"") != std::string::npos, script);
  BOOST_TEST(script.find("--server-key /etc/troupe/admin/server.pub") != std::string::npos, script);
  json items = json::array();
  for (const auto& v : sts["spec"]["template"]["spec"]["volumes"])
    if (v["name"] == "config") items = v["configMap"]["items"];
  BOOST_TEST(items.dump().find(R"({"key":"drain.troupe-main-1","path":"drain/troupe-main-1"})") != std::string::npos, items.dump());
  // Grace: one drain of request timeout x 2 (30 s -> 60 s) at each of 2 heads, and the stop.
  const int grace = sts["spec"]["template"]["spec"]["terminationGracePeriodSeconds"];
  BOOST_TEST(grace >= 2 * 60 + 10);
  // A pool with one replica has nowhere to drain to: no hook.
  const auto one = deploy_config("disagg-two-nodes.toml");
  BOOST_TEST(!container_of(one.named("StatefulSet", "troupe-decode")).contains("lifecycle"));
}

// A pool named `main$(touch /tmp/PWNED)` was written into the preStop hook's `sh -c` script
// inside double quotes. Names are now RFC 1123 labels, refused at the topology's edge, and the
// script is the same text whatever the topology names.
BOOST_AUTO_TEST_CASE(names_that_reach_a_shell_a_yaml_document_or_a_path_are_rfc_1123_labels) {
  const std::string text = config_text("two-heads.toml");
  auto with_pool = [&](const std::string& name) {
    std::string t = text;
    const std::string from = "name = \"main\"";
    t.replace(t.find(from), from.size(), "name = \"" + name + "\"");
    for (std::size_t at = 0; (at = t.find("\"main\"", at)) != std::string::npos; at += name.size() + 2) t.replace(at, 6, "\"" + name + "\"");
    return t;
  };
  auto refusal = [&](const std::string& t) -> std::string {
    try {
      parse_topology(t, "t.toml");
    } catch (const input_error& e) {
      return e.what();
    }
    return "";
  };
  BOOST_TEST(refusal(with_pool("main")).empty());
  for (const std::string bad : {"main$(touch /tmp/PWNED)", "main\\u0000x", "Main", "main_pool", "-main", "main-", "a b", "main\\n"}) {
    const std::string why = refusal(with_pool(bad));
    BOOST_TEST(why.find("pools.name") != std::string::npos, bad << ": " << why);
  }
  const std::string long_name = refusal(with_pool(std::string(5000, 'a')));
  BOOST_TEST(long_name.find("5000 characters; at most 50") != std::string::npos, long_name);
  BOOST_TEST(long_name.size() < 300);  // the name is not echoed whole
  std::string node = text;
  node.replace(node.find("name = \"head-a\""), 15, "name = \"h;rm -rf /\"");
  BOOST_TEST(refusal(node).find("nodes.name") != std::string::npos, refusal(node));
  // The script never holds a name: two topologies with other names have the same hook.
  const std::string script = container_of(deploy_config("two-heads.toml").named("StatefulSet", "troupe-main"))["lifecycle"]["preStop"]["exec"]["command"][2];
  const std::string other = container_of(deploy_config("kubernetes.toml").named("StatefulSet", "troupe-main"))["lifecycle"]["preStop"]["exec"]["command"][2];
  BOOST_TEST(script.find("main") == std::string::npos, script);
  BOOST_TEST(script == other);
}

BOOST_AUTO_TEST_CASE(probes_say_whether_the_pod_serves) {
  const auto d = deploy_config("two-heads.toml");
  const json& head = container_of(d.named("StatefulSet", "troupe-head"));
  BOOST_TEST(head["readinessProbe"]["httpGet"]["path"] == "/health");
  BOOST_TEST(head["startupProbe"]["httpGet"]["path"] == "/health");
  BOOST_TEST(head["livenessProbe"]["httpGet"]["path"] == "/metrics");
  const json& node = container_of(d.named("StatefulSet", "troupe-main"));
  BOOST_TEST(node["args"].dump().find("--status-file") != std::string::npos);
  BOOST_TEST(node["readinessProbe"]["exec"]["command"].dump() == R"(["grep","-qx","ready","/var/lib/troupe/status"])");
}

BOOST_AUTO_TEST_CASE(memory_requests_hold_the_weights_and_the_kv_of_the_replicas_a_pod_starts) {
  const auto d = deploy_config("two-heads.toml");  // 256 MiB of KV per replica, one per node pod
  const json& node = container_of(d.named("StatefulSet", "troupe-main"));
  BOOST_TEST(node["resources"]["requests"]["memory"] == std::to_string(100 + 256 + 512) + "Mi");
  const json& vols = d.named("StatefulSet", "troupe-main")["spec"]["template"]["spec"]["volumes"];
  for (const auto& v : vols)
    if (v["name"] == "shm") BOOST_TEST(v["emptyDir"]["sizeLimit"] == std::to_string(256 + 64) + "Mi");
  // Heads that host no replica need only the process.
  BOOST_TEST(container_of(d.named("StatefulSet", "troupe-head"))["resources"]["requests"]["memory"] == "512Mi");
}

BOOST_AUTO_TEST_CASE(a_pool_whose_replicas_are_pods_is_scaled_by_keda_between_its_bounds) {
  const auto d = deploy_config("kubernetes.toml");
  const json& sts = d.named("StatefulSet", "troupe-main");
  BOOST_TEST(sts["spec"]["replicas"] == 2);  // the topology's replicas
  const json& so = d.named("ScaledObject", "troupe-main");
  BOOST_TEST(so["spec"]["minReplicaCount"] == 1);
  BOOST_TEST(so["spec"]["maxReplicaCount"] == 4);
  BOOST_TEST(so["spec"]["scaleTargetRef"]["name"] == "troupe-main");
  const std::string query = so["spec"]["triggers"][0]["metadata"]["query"];
  BOOST_TEST(query.find("troupe:replica_num_requests_waiting{replica=~\"main-[0-9]+\"}") != std::string::npos, query);
  // A pod KEDA adds drains its own replica when KEDA removes it again.
  BOOST_TEST(d.named("ConfigMap", "troupe-topology")["data"]["drain.troupe-main-3"] == "main-3\n");
  // Every replica with a pod serves: how many pods there are is Kubernetes' to say.
  const auto pods = d.pod_topology();
  BOOST_TEST(pods.pools[0].replicas == 4);
  BOOST_TEST(pods.pools[0].warm() == 0);
  // A pool that shares its nodes' slots (two-heads: 3 slots over 2 nodes) keeps Troupe's scaling.
  BOOST_TEST(deploy_config("two-heads.toml").named("StatefulSet", "troupe-main")["spec"]["replicas"] == 2);
  for (const auto& m : deploy_config("two-heads.toml").objects) BOOST_TEST(m.object["kind"] != "ScaledObject");
}

BOOST_AUTO_TEST_CASE(one_disruption_budget_per_pool_over_the_pods_holding_it) {
  const auto d = deploy_config("disagg-two-nodes.toml");
  const json& pdb = d.named("PodDisruptionBudget", "troupe-decode");
  BOOST_TEST(pdb["spec"]["maxUnavailable"] == 1);
  BOOST_TEST(pdb["spec"]["selector"]["matchLabels"]["troupe.dev/pool-decode"] == "serves");
  BOOST_TEST(d.named("StatefulSet", "troupe-decode")["spec"]["template"]["metadata"]["labels"]["troupe.dev/pool-decode"] == "serves");
  BOOST_TEST(!d.named("StatefulSet", "troupe-prefill")["spec"]["template"]["metadata"]["labels"].contains("troupe.dev/pool-decode"));
}

BOOST_AUTO_TEST_CASE(secrets_stay_out_of_the_configmap) {
  const auto d = deploy_config("two-heads.toml");
  const std::string config = d.named("ConfigMap", "troupe-topology").dump();
  const auto s = secrets();
  for (const auto& secret : {s.cluster_token, s.api_key, s.admin_server_secret, s.admin_client_secret})
    BOOST_TEST(config.find(secret) == std::string::npos);
  BOOST_TEST(d.named("Secret", "troupe-cluster")["stringData"]["token"] == s.cluster_token);
  BOOST_TEST(d.named("Secret", "troupe-tls")["type"] == "kubernetes.io/tls");
  // An existing TLS Secret is used, not generated.
  deploy::kubernetes_options o;
  o.tls_secret = "cluster-tls";
  const auto named = deploy_config("two-heads.toml", o);
  for (const auto& m : named.objects) BOOST_TEST(m.object["metadata"]["name"] != "troupe-tls");
  BOOST_TEST(named.named("StatefulSet", "troupe-main").dump().find("\"secretName\":\"cluster-tls\"") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(the_dashboard_ships_for_grafanas_sidecar_under_the_topologys_metric_prefix) {
  const auto d = deploy_config("local.toml");
  const json& cm = d.named("ConfigMap", "troupe-dashboard");
  BOOST_TEST(cm["metadata"]["labels"]["grafana_dashboard"] == "1");
  const auto dash = json::parse(cm["data"]["troupe-dashboard.json"].get<std::string>());
  BOOST_TEST(dash["panels"].size() >= 20u);
  const std::string text = config_text("local.toml") + "\n[frontend]\nmetric_prefix = \"llm_\"\n";
  const auto t = parse_topology(text, "t.toml");
  for (const auto& m : deploy::kubernetes_manifests(t, text, {}, secrets()))
    if (m.object["metadata"]["name"] == "troupe-dashboard") {
      const std::string renamed = m.object["data"]["troupe-dashboard.json"];
      BOOST_TEST(renamed.find("troupe:") == std::string::npos);
      BOOST_TEST(renamed.find("llm_time_to_first_token_seconds_bucket") != std::string::npos);
    }
}

BOOST_AUTO_TEST_CASE(what_pods_cannot_run_is_refused_by_key) {
  BOOST_TEST(refusal(config_text("tp2-two-nodes.toml")).find("pools.rank_nodes") != std::string::npos);
  BOOST_TEST(refusal(two_nodes + "[frontend]\napi_key_routes = \"all\"\napi_keys = [\"k\"]\n").find("frontend.api_key") != std::string::npos);
  BOOST_TEST(refusal(two_nodes + "[frontend]\napi_keys = [\"k\"]\n").find("frontend.api_keys") != std::string::npos);
  const std::string events = two_nodes + "[kv_events]\nendpoint = \"tcp://0.0.0.0:5557\"\nsecret_key = \"k.key\"\nauthorized_keys = [\"" +
                             secrets().admin_client_public + "\"]\n";
  BOOST_TEST(refusal(events).find("kv_events.secret_key") != std::string::npos);
  const std::string templ = R"(
[model]
path = "models/kjv"
chat_template = "/nowhere/t.jinja"
[[nodes]]
name = "head"
[[pools]]
name = "main"
)";
  BOOST_TEST(refusal(templ).find("[model] chat_template") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(yaml_keeps_every_string_a_string_and_text_as_written) {
  const json v = {{"apiVersion", "v1"},
                  {"kind", "X"},
                  {"data", {{"on", "on"}, {"mode", "0755"}, {"n", 3}, {"text", "a = 1\n\nb = 'x'\n"}, {"raw", "no newline\nat end"}}},
                  {"list", {{{"name", "c"}, {"args", {"--x", "$(Y)"}}}, "plain"}},
                  {"empty", json::object()}};
  const std::string y = deploy::to_yaml(v);
  const std::string expected =
      "apiVersion: \"v1\"\n"
      "kind: \"X\"\n"
      "data:\n"
      "  mode: \"0755\"\n"
      "  \"n\": 3\n"
      "  \"on\": \"on\"\n"
      "  raw: |-\n"
      "    no newline\n"
      "    at end\n"
      "  text: |\n"
      "    a = 1\n"
      "\n"
      "    b = 'x'\n"
      "empty: {}\n"
      "list:\n"
      "- name: \"c\"\n"
      "  args:\n"
      "  - \"--x\"\n"
      "  - \"$(Y)\"\n"
      "- \"plain\"\n";
  BOOST_TEST(y == expected);
  BOOST_TEST(deploy::to_yaml_documents({json{{"a", 1}}, json{{"b", 2}}}) == "a: 1\n---\nb: 2\n");
}

BOOST_AUTO_TEST_CASE(every_deployable_config_gives_pods_a_topology_they_can_read) {
  int read = 0;
  for (const auto& e : std::filesystem::directory_iterator(std::string(TROUPE_SOURCE_DIR) + "/configs")) {
    const std::string name = e.path().filename().string();
    if (e.path().extension() != ".toml" || name == "tp2-two-nodes.toml") continue;  // refused: rank_nodes
    BOOST_TEST_CONTEXT(name) {
      const auto d = deploy_config(name);
      const std::string text = d.named("ConfigMap", "troupe-topology")["data"]["topology.toml"];
      try {
        const auto pods = parse_topology(text, name + " (pods)");
        BOOST_TEST(pods.nodes.size() == d.topo.nodes.size());
        BOOST_TEST(pods.pools.size() == d.topo.pools.size());
        ++read;
      } catch (const input_error& e) {
        // Adapters are looked for when the topology is read; in the pods they are on /models.
        BOOST_TEST(std::string(e.what()).find("lora.adapters.path: /models/") != std::string::npos, e.what());
      }
    }
  }
  BOOST_TEST(read >= 20);
}
