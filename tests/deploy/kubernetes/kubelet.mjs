// A miniature kubelet for tests: runs the pods of the StatefulSets in a folder of manifests
// (`troupe deploy kubernetes -o DIR`) as processes on this machine, the way a node of a cluster
// would, so a test can check that the manifests work without a cluster:
// - each pod in a network namespace named like the pod, on a bridge of its own, with the pods'
//   and Services' DNS names in the namespace's /etc/hosts (the headless Service's per-pod names,
//   the other Services' names at the address their proxies listen on);
// - the container's command and arguments with $(VAR) expanded from its environment (fieldRef
//   metadata.name, secretKeyRef), run as runAsUser/runAsGroup in a mount namespace of its own
//   that has its volumes (ConfigMap and Secret files with their modes, emptyDirs as tmpfs,
//   PersistentVolumeClaims as folders named by --claim, bound before the tmpfs ones) and a
//   read-only root when asked;
// - startup, readiness and liveness probes (exec in the pod's namespaces, httpGet to its address),
//   a Service as a TCP proxy to its ready endpoints, restarts of a pod whose process ends, as a
//   StatefulSet's pod is, and deletion that runs the preStop hook, then SIGTERM, then SIGKILL when
//   terminationGracePeriodSeconds has passed.
//
//   node kubelet.mjs DIR --bin DIR [--claim NAME=DIR]... [--probe-period S]
//
// --bin holds the image's `troupe`: every container's command runs it.
//
// Needs root (namespaces, mounts). Prints "service NAME PORT" for each Service (a loopback port
// that proxies as the Service does, as `kubectl port-forward` would), "control PORT" (an HTTP
// endpoint: GET /pods; POST /kill/POD, /delete/POD, /scale/STATEFULSET/N), and one line per pod
// event ("ready POD", "unready POD", "exited POD", "started POD"). Stops everything and removes
// what it made on SIGTERM or SIGINT.
import { spawn, spawnSync } from "node:child_process";
import { mkdirSync, readFileSync, readdirSync, rmSync, writeFileSync, chmodSync, chownSync, copyFileSync, existsSync, rmdirSync } from "node:fs";
import { createServer, connect } from "node:net";
import { request as httpRequest, createServer as createHttpServer } from "node:http";
import { join } from "node:path";
import { parseAllDocuments } from "yaml";

const argv = process.argv.slice(2);
const dir = argv[0];
const flag = (name, fallback) => {
  const i = argv.indexOf(name);
  return i < 0 ? fallback : argv[i + 1];
};
const claims = {};
argv.forEach((a, i) => {
  if (a === "--claim") {
    const [name, path] = argv[i + 1].split("=");
    claims[name] = path;
  }
});
const bin = flag("--bin", "");
const probePeriod = Number(flag("--probe-period", "1"));
const tag = String(process.pid % 100);
const subnet = `10.${150 + (process.pid % 100)}.0`;
// Under /var/tmp, not /tmp: the pods mount an emptyDir at /tmp, which would hide this folder's
// volume files and the image from them.
const work = `/var/tmp/troupe-kubelet-${process.pid}`;
mkdirSync(work, { recursive: true });
// The image: the binaries of --bin, copied where every pod sees them (--bin may be under /tmp).
const image = `${work}/image`;
mkdirSync(image, { recursive: true });
for (const f of readdirSync(bin)) if (f === "troupe") copyFileSync(join(bin, f), join(image, f));
chmodSync(join(image, "troupe"), 0o755);

const say = (line) => process.stdout.write(line + "\n");
function sh(cmd, args, allowFail = false) {
  const r = spawnSync(cmd, args, { encoding: "utf8" });
  if (r.status !== 0 && !allowFail) throw new Error(`${cmd} ${args.join(" ")}: ${r.stderr || r.error}`);
  return r;
}

// --- The objects.
const objects = [];
for (const f of readdirSync(dir).filter((f) => f.endsWith(".yaml") && f !== "kustomization.yaml"))
  for (const doc of parseAllDocuments(readFileSync(join(dir, f), "utf8"))) objects.push(doc.toJS());
const byKind = (kind) => objects.filter((o) => o.kind === kind);
const named = (kind, name) => objects.find((o) => o.kind === kind && o.metadata.name === name);
const matches = (labels, selector) => Object.entries(selector).every(([k, v]) => labels[k] === v);

// --- The network: a bridge in a namespace of its own; this namespace reaches it through one veth.
const bridgeNs = `kubelet-${tag}`;
const gateway = `${subnet}.1`;
const created = { netns: [bridgeNs], etc: [], mountpoints: [] };
sh("ip", ["netns", "del", bridgeNs], true);  // left by an earlier run whose pid had the same tag
sh("ip", ["link", "del", `kh${tag}`], true);
sh("ip", ["netns", "add", bridgeNs]);
sh("ip", ["-n", bridgeNs, "link", "add", "br0", "type", "bridge"]);
sh("ip", ["-n", bridgeNs, "link", "set", "br0", "up"]);
sh("ip", ["link", "add", `kh${tag}`, "type", "veth", "peer", "name", `kb${tag}`]);
sh("ip", ["link", "set", `kb${tag}`, "netns", bridgeNs]);
sh("ip", ["-n", bridgeNs, "link", "set", `kb${tag}`, "master", "br0", "up"]);
sh("ip", ["addr", "add", `${gateway}/24`, "dev", `kh${tag}`]);
sh("ip", ["link", "set", `kh${tag}`, "up"]);

// --- Pods: every StatefulSet's, numbered for their addresses.
const pods = new Map();  // name -> pod
let nextAddress = 10;
function podsOf(sts) {
  return [...pods.values()].filter((p) => p.sts === sts.metadata.name);
}
function declarePod(sts, ordinal) {
  const name = `${sts.metadata.name}-${ordinal}`;
  if (pods.has(name)) return pods.get(name);
  const ns = sts.metadata.namespace ?? "default";
  const pod = { name, sts: sts.metadata.name, ordinal, ns, ip: `${subnet}.${nextAddress++}`, labels: sts.spec.template.metadata.labels,
                spec: sts.spec.template.spec, ready: false, started: false, restarts: 0, crashes: 0, wasReady: false, proc: null, deleting: false,
                gone: true };
  pods.set(name, pod);
  return pod;
}

// Every pod a StatefulSet can have gets its address now, so /etc/hosts is whole from the start.
const services = byKind("Service");
const serviceIps = {};
for (const sts of byKind("StatefulSet")) {
  const most = Math.max(sts.spec.replicas ?? 1, ...byKind("ScaledObject").filter((s) => s.spec.scaleTargetRef.name === sts.metadata.name).map((s) => s.spec.maxReplicaCount));
  for (let k = 0; k < most; ++k) declarePod(sts, k);
}
for (const svc of services) if (svc.spec.clusterIP !== "None") serviceIps[svc.metadata.name] = gateway;

function hostsFile() {
  let text = "127.0.0.1 localhost\n::1 localhost\n";
  for (const p of pods.values()) {
    const svc = p.spec.subdomain ?? byKind("StatefulSet").find((s) => s.metadata.name === p.sts).spec.serviceName;
    text += `${p.ip} ${p.name}.${svc}.${p.ns}.svc.cluster.local ${p.name}.${svc}.${p.ns}.svc ${p.name}\n`;
  }
  for (const svc of services) {
    const ns = svc.metadata.namespace ?? "default";
    if (serviceIps[svc.metadata.name]) text += `${serviceIps[svc.metadata.name]} ${svc.metadata.name}.${ns}.svc.cluster.local ${svc.metadata.name}.${ns}.svc ${svc.metadata.name}\n`;
  }
  return text;
}

function setUpNetwork(pod) {
  sh("ip", ["netns", "del", pod.name], true);  // one left by an earlier run
  sh("ip", ["netns", "add", pod.name]);
  created.netns.push(pod.name);
  const k = pod.ip.split(".")[3];
  sh("ip", ["link", "add", `kp${tag}x${k}`, "type", "veth", "peer", "name", `kc${tag}x${k}`]);
  sh("ip", ["link", "set", `kp${tag}x${k}`, "netns", bridgeNs]);
  sh("ip", ["-n", bridgeNs, "link", "set", `kp${tag}x${k}`, "master", "br0", "up"]);
  sh("ip", ["link", "set", `kc${tag}x${k}`, "netns", pod.name]);
  sh("ip", ["-n", pod.name, "link", "set", `kc${tag}x${k}`, "name", "eth0"]);
  sh("ip", ["-n", pod.name, "addr", "add", `${pod.ip}/24`, "dev", "eth0"]);
  sh("ip", ["-n", pod.name, "link", "set", "eth0", "up"]);
  sh("ip", ["-n", pod.name, "link", "set", "lo", "up"]);
  if (!existsSync("/etc/netns")) created.etc.push("/etc/netns");
  const etc = `/etc/netns/${pod.name}`;
  mkdirSync(etc, { recursive: true });
  created.etc.push(etc);
  writeFileSync(`${etc}/hosts`, hostsFile());
  writeFileSync(`${etc}/resolv.conf`, "");  // names come from the hosts file; no DNS server to wait for
}

// --- Volumes: files the kubelet writes, mounted by the pod's own setup script.
function quote(s) {
  return `'${String(s).replace(/'/g, `'\\''`)}'`;
}
function volumeSetup(pod) {
  const sec = pod.spec.securityContext ?? {};
  const group = sec.fsGroup ?? 0;
  const c = pod.spec.containers[0];
  const lines = [];
  const readOnlyRoot = c.securityContext?.readOnlyRootFilesystem === true;
  // Mount points must exist on this machine's root: the ones made here go at the end.
  for (const m of c.volumeMounts ?? []) {
    const missing = [];
    for (let d = m.mountPath; d !== "/" && !existsSync(d); d = join(d, "..")) missing.unshift(d);
    for (const d of missing) {
      mkdirSync(d);
      created.mountpoints.push(d);
    }
  }
  // The root made read-only in this mount namespace alone (its mounts are private copies).
  if (readOnlyRoot) lines.push("mount -o remount,bind,ro /");
  // Folders of this machine are bound first, tmpfs volumes after: an emptyDir at /tmp would
  // otherwise hide a source under /tmp (this kubelet's own files, a checkout there).
  const binds = [], tmpfs = [];
  for (const m of c.volumeMounts ?? []) {
    const v = pod.spec.volumes.find((v) => v.name === m.name);
    const src = `${work}/${pod.name}/volumes/${v.name}`;
    if (v.configMap || v.secret) {
      rmSync(src, { recursive: true, force: true });
      mkdirSync(src, { recursive: true });
      const obj = v.configMap ? named("ConfigMap", v.configMap.name) : named("Secret", v.secret.secretName);
      if (!obj) throw new Error(`${pod.name}: no ${v.configMap ? "ConfigMap" : "Secret"} for volume ${v.name}`);
      const data = obj.data && v.configMap ? obj.data : obj.stringData ?? {};
      const items = v.configMap?.items ?? Object.keys(data).map((key) => ({ key, path: key }));
      const mode = v.secret?.defaultMode ?? v.configMap?.defaultMode ?? 0o644;
      for (const item of items) {
        const path = join(src, item.path);
        mkdirSync(join(path, ".."), { recursive: true });
        writeFileSync(path, data[item.key]);
        chmodSync(path, mode);
        chownSync(path, 0, group);
      }
      chmodSync(src, 0o755);
      binds.push(`mount --bind ${quote(src)} ${quote(m.mountPath)} && mount -o remount,bind,ro ${quote(m.mountPath)}`);
    } else if (v.emptyDir) {
      const size = v.emptyDir.sizeLimit ? `,size=${v.emptyDir.sizeLimit.replace(/i$/, "").toLowerCase()}` : "";
      tmpfs.push(`mount -t tmpfs -o mode=1777${size} tmpfs ${quote(m.mountPath)}`);
    } else if (v.persistentVolumeClaim) {
      const path = claims[v.persistentVolumeClaim.claimName];
      if (!path) throw new Error(`${pod.name}: no --claim for ${v.persistentVolumeClaim.claimName}`);
      binds.push(`mount --bind ${quote(path)} ${quote(m.mountPath)}` + (m.readOnly ? ` && mount -o remount,bind,ro ${quote(m.mountPath)}` : ""));
    }
  }
  lines.push(...binds, ...tmpfs);
  return lines;
}

// --- The container's environment and command.
function environment(pod) {
  const env = { PATH: `${image}:/usr/local/bin:/usr/bin:/bin`, HOME: "/tmp", HOSTNAME: pod.name };
  for (const e of pod.spec.containers[0].env ?? []) {
    if (e.value !== undefined) env[e.name] = e.value;
    else if (e.valueFrom?.fieldRef?.fieldPath === "metadata.name") env[e.name] = pod.name;
    else if (e.valueFrom?.fieldRef?.fieldPath === "metadata.namespace") env[e.name] = pod.ns;
    else if (e.valueFrom?.secretKeyRef) {
      const s = named("Secret", e.valueFrom.secretKeyRef.name);
      env[e.name] = (s.stringData ?? {})[e.valueFrom.secretKeyRef.key];
    } else throw new Error(`${pod.name}: env ${e.name}: this kubelet does not know its source`);
  }
  return env;
}
const expand = (s, env) => s.replace(/\$\(([A-Za-z_][A-Za-z0-9_]*)\)/g, (all, v) => (v in env ? env[v] : all));

function userPrefix(pod) {
  const sec = pod.spec.securityContext ?? {};
  if (sec.runAsUser === undefined) return [];
  const gid = sec.runAsGroup ?? sec.runAsUser;
  const groups = [gid, sec.fsGroup].filter((g) => g !== undefined);
  return ["setpriv", `--reuid=${sec.runAsUser}`, `--regid=${gid}`, `--groups=${[...new Set(groups)].join(",")}`, "--inh-caps=-all", "--"];
}

function startPod(pod) {
  const c = pod.spec.containers[0];
  const env = environment(pod);
  const command = [...(c.command ?? []), ...(c.args ?? [])].map((a) => expand(a, env));
  const script = [...volumeSetup(pod), `exec ${[...userPrefix(pod), ...command].map(quote).join(" ")}`].join(" && ");
  const log = `${work}/${pod.name}.log`;
  const out = (data) => writeFileSync(log, data, { flag: "a" });
  pod.proc = spawn("ip", ["netns", "exec", pod.name, "unshare", "--mount", "--propagation", "private", "--", "sh", "-c", script], { env });
  pod.proc.stdout.on("data", out);
  pod.proc.stderr.on("data", out);
  pod.env = env;
  pod.started = false;
  pod.ready = false;
  pod.gone = false;
  pod.failures = { startup: 0, readiness: 0, liveness: 0 };
  pod.startedAt = Date.now();
  say(`started ${pod.name}`);
  pod.proc.on("exit", (code, signal) => {
    pod.proc = null;
    if (pod.ready) say(`unready ${pod.name}`);
    pod.ready = false;
    say(`exited ${pod.name} ${signal ?? code}`);
    if (pod.deleting || shuttingDown) {
      pod.gone = true;
      pod.onGone?.();
      return;
    }
    ++pod.restarts;
    if (!pod.wasReady && ++pod.crashes >= 5) {
      // A pod that never gets ready keeps failing the same way: say so and stop, so a test
      // waiting for readiness ends with the reason instead of waiting for ever.
      say(`failed ${pod.name} exited ${pod.crashes} times without getting ready: ${readFileSync(`${work}/${pod.name}.log`, "utf8").slice(-600).replace(/\n/g, " | ")}`);
      shuttingDown = true;
      cleanUp();
      process.exit(1);
    }
    setTimeout(() => !shuttingDown && !pod.deleting && startPod(pod), 1000);  // restartPolicy: Always
  });
}

// --- Probes.
function runProbe(pod, probe) {
  return new Promise((resolve) => {
    if (!pod.proc) return resolve(false);
    if (probe.exec) {
      const p = spawn("nsenter", ["--target", String(pod.proc.pid), "--mount", "--net", "--", ...userPrefix(pod), ...probe.exec.command], { env: pod.env });
      const timer = setTimeout(() => p.kill("SIGKILL"), (probe.timeoutSeconds ?? 1) * 1000);
      p.on("exit", (code) => {
        clearTimeout(timer);
        resolve(code === 0);
      });
      return;
    }
    if (probe.httpGet) {
      const port = typeof probe.httpGet.port === "number" ? probe.httpGet.port : pod.spec.containers[0].ports.find((p) => p.name === probe.httpGet.port).containerPort;
      const req = httpRequest({ host: pod.ip, port, path: probe.httpGet.path, timeout: (probe.timeoutSeconds ?? 1) * 1000 }, (res) => {
        res.resume();
        resolve(res.statusCode >= 200 && res.statusCode < 400);
      });
      req.on("error", () => resolve(false));
      req.on("timeout", () => req.destroy());
      req.end();
      return;
    }
    resolve(true);
  });
}

async function probePod(pod) {
  const c = pod.spec.containers[0];
  if (!pod.proc || pod.deleting) return;
  if (!pod.started) {
    const ok = c.startupProbe ? await runProbe(pod, c.startupProbe) : true;
    if (ok) pod.started = true;
    else if (++pod.failures.startup >= (c.startupProbe.failureThreshold ?? 3)) return pod.proc?.kill("SIGKILL");
    if (!pod.started) return;
  }
  const ready = c.readinessProbe ? await runProbe(pod, c.readinessProbe) : true;
  if (ready) pod.failures.readiness = 0;
  if (ready && !pod.ready && pod.proc && !pod.deleting) {
    pod.ready = true;
    pod.wasReady = true;
    pod.crashes = 0;
    say(`ready ${pod.name}`);
  } else if (!ready && pod.ready && ++pod.failures.readiness >= (c.readinessProbe.failureThreshold ?? 3)) {
    pod.ready = false;
    say(`unready ${pod.name}`);
  }
  if (c.livenessProbe) {
    if (await runProbe(pod, c.livenessProbe)) pod.failures.liveness = 0;
    else if (++pod.failures.liveness >= (c.livenessProbe.failureThreshold ?? 3)) pod.proc?.kill("SIGKILL");
  }
}
const probeTimer = setInterval(() => pods.forEach((p) => probePod(p)), probePeriod * 1000);

// --- Deleting a pod: preStop, SIGTERM, SIGKILL after the grace period.
function deletePod(pod) {
  return new Promise((resolve) => {
    if (!pod.proc) return resolve({ prestop: null });
    pod.deleting = true;
    if (pod.ready) say(`unready ${pod.name}`);
    pod.ready = false;  // endpoints drop it at once
    const grace = (pod.spec.terminationGracePeriodSeconds ?? 30) * 1000;
    const killTimer = setTimeout(() => pod.proc?.kill("SIGKILL"), grace);
    const result = { prestop: null, prestopOutput: "" };
    pod.onGone = () => {
      clearTimeout(killTimer);
      pod.deleting = false;
      pod.onGone = null;
      resolve(result);
    };
    const hook = pod.spec.containers[0].lifecycle?.preStop?.exec?.command;
    if (!hook) return pod.proc.kill("SIGTERM");
    const p = spawn("nsenter", ["--target", String(pod.proc.pid), "--mount", "--net", "--", ...userPrefix(pod), ...hook], { env: pod.env });
    p.stdout.on("data", (d) => (result.prestopOutput += d));
    p.stderr.on("data", (d) => (result.prestopOutput += d));
    p.on("exit", (code) => {
      result.prestop = code;
      say(`prestop ${pod.name} ${code}`);
      pod.proc?.kill("SIGTERM");
    });
  });
}

// --- Services: a proxy per Service with a selector, to its ready endpoints in turn.
let turn = 0;
for (const svc of services.filter((s) => s.spec.clusterIP !== "None")) {
  for (const port of svc.spec.ports) {
    const targetOf = (pod) => {
      const t = port.targetPort ?? port.port;
      return typeof t === "number" ? t : pod.spec.containers[0].ports.find((p) => p.name === t).containerPort;
    };
    const proxy = (client) => {
      const ready = [...pods.values()].filter((p) => p.ready && matches(p.labels, svc.spec.selector));
      if (!ready.length) return client.destroy();
      const pod = ready[turn++ % ready.length];
      const upstream = connect(targetOf(pod), pod.ip);
      client.pipe(upstream).pipe(client);
      const close = () => {
        client.destroy();
        upstream.destroy();
      };
      client.on("error", close);
      upstream.on("error", close);
    };
    const local = createServer(proxy).listen(0, "127.0.0.1", () => say(`service ${svc.metadata.name} ${local.address().port}`));
    createServer(proxy).listen(port.port, gateway);  // what the pods' /etc/hosts names it
  }
}

// --- Control.
async function scale(stsName, n) {
  const sts = named("StatefulSet", stsName);
  const results = {};
  for (let k = podsOf(sts).length - 1; k >= 0; --k) {
    const pod = pods.get(`${stsName}-${k}`);
    if (k >= n && !pod.gone) results[pod.name] = await deletePod(pod);  // highest ordinal first, one at a time
  }
  for (let k = 0; k < n; ++k) {
    const pod = declarePod(sts, k);
    if (pod.gone && !pod.proc) {
      if (!created.netns.includes(pod.name)) setUpNetwork(pod);
      startPod(pod);
    }
  }
  sts.spec.replicas = n;
  return results;
}

const control = createHttpServer(async (req, res) => {
  const parts = req.url.split("/").filter(Boolean);
  const reply = (status, body) => {
    res.writeHead(status, { "content-type": "application/json" });
    res.end(JSON.stringify(body));
  };
  try {
    if (req.method === "GET" && parts[0] === "pods")
      return reply(200, [...pods.values()].map((p) => ({ name: p.name, ip: p.ip, ready: p.ready, running: !!p.proc, restarts: p.restarts })));
    const pod = pods.get(parts[1]);
    if (req.method === "POST" && parts[0] === "kill" && pod?.proc) {
      pod.proc.kill("SIGKILL");  // the StatefulSet starts it again: same name, same address
      return reply(200, { killed: pod.name });
    }
    if (req.method === "POST" && parts[0] === "delete" && pod) {
      const r = await deletePod(pod);
      startPod(pod);  // a deleted StatefulSet pod is made again
      return reply(200, r);
    }
    if (req.method === "POST" && parts[0] === "scale") return reply(200, await scale(parts[1], Number(parts[2])));
    reply(404, { error: `no route ${req.method} ${req.url}` });
  } catch (e) {
    reply(500, { error: String(e) });
  }
});
control.listen(0, "127.0.0.1", () => say(`control ${control.address().port}`));

// --- Start, and stop on a signal.
let shuttingDown = false;
// Blocks until each process has exited (a zombie counts: its namespaces and mounts are gone),
// at most 10 s: mount points in its namespace cannot be removed while it runs.
function awaitExit(pids) {
  const pause = new Int32Array(new SharedArrayBuffer(4));
  for (let waited = 0; waited < 10000; waited += 20) {
    const running = pids.filter((pid) => {
      try {
        return !/^State:\s+Z/m.test(readFileSync(`/proc/${pid}/status`, "utf8"));
      } catch {
        return false;
      }
    });
    if (!running.length) return;
    Atomics.wait(pause, 0, 0, 20);
  }
}

function cleanUp() {
  const pids = [...pods.values()].filter((p) => p.proc).map((p) => p.proc.pid);
  for (const p of pods.values()) p.proc?.kill("SIGKILL");
  awaitExit(pids);
  for (const ns of created.netns) sh("ip", ["netns", "del", ns], true);
  sh("ip", ["link", "del", `kh${tag}`], true);
  for (const etc of created.etc.reverse()) rmSync(etc, { recursive: true, force: true });
  for (const m of created.mountpoints.reverse()) {
    try {
      rmdirSync(m);
    } catch {}
  }
  rmSync(work, { recursive: true, force: true });
}
process.on("uncaughtException", (e) => {
  say(`failed ${e.stack ?? e}`);
  shuttingDown = true;
  cleanUp();
  process.exit(1);
});
for (const sig of ["SIGTERM", "SIGINT"])
  process.on(sig, () => {
    shuttingDown = true;
    clearInterval(probeTimer);
    cleanUp();
    process.exit(0);
  });

try {
  say(`logs ${work}`);
  for (const sts of byKind("StatefulSet")) await scale(sts.metadata.name, sts.spec.replicas ?? 1);
} catch (e) {
  say(`failed ${e.message}`);
  shuttingDown = true;
  cleanUp();
  process.exit(1);
}
