// Validates Kubernetes manifests offline: every YAML document of every file in the folders
// given must be an object kind this knows (the Kubernetes API of kubernetes-models, KEDA,
// the Prometheus operator), valid against its JSON schema (types, required fields, enums,
// formats), and hold no field its API does not declare (the schemas allow extra fields; the
// packages' type declarations list every one, so this walks them). Prints one line per file and
// the count of each kind; exits 1 on the first folder with an invalid object.
import { readFileSync, readdirSync, existsSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { parseAllDocuments } from "yaml";

const here = dirname(fileURLToPath(import.meta.url));
const modules = join(here, "node_modules");

const models = {
  "v1/ConfigMap": "kubernetes-models/v1/ConfigMap",
  "v1/Secret": "kubernetes-models/v1/Secret",
  "v1/Service": "kubernetes-models/v1/Service",
  "apps/v1/StatefulSet": "kubernetes-models/apps/v1/StatefulSet",
  "policy/v1/PodDisruptionBudget": "kubernetes-models/policy/v1/PodDisruptionBudget",
  "autoscaling/v2/HorizontalPodAutoscaler": "kubernetes-models/autoscaling/v2/HorizontalPodAutoscaler",
  "keda.sh/v1alpha1/ScaledObject": "@kubernetes-models/keda/keda.sh/v1alpha1/ScaledObject",
  "monitoring.coreos.com/v1/ServiceMonitor": "@kubernetes-models/prometheus-operator/monitoring.coreos.com/v1/ServiceMonitor",
};

// --- The fields each type declares, read from the packages' .d.ts files.

function declarationFile(specifier, from) {
  const base = specifier.startsWith(".") ? join(dirname(from), specifier) : join(modules, specifier);
  return base.replace(/\.js$/, "") + ".d.ts";
}

function interfaceBody(text) {
  const start = text.search(/export interface \w+[^{]*\{/);
  if (start < 0) return null;
  let i = text.indexOf("{", start), depth = 0;
  for (let j = i; j < text.length; ++j) {
    if (text[j] === "{") ++depth;
    if (text[j] === "}" && --depth === 0) return text.slice(i + 1, j);
  }
  return null;
}

function splitTopLevel(body) {
  const parts = [];
  let depth = 0, cur = "";
  for (const c of body) {
    if (c === "{" || c === "<" || c === "(") ++depth;
    if (c === "}" || c === ">" || c === ")") --depth;
    if (c === ";" && depth === 0) { parts.push(cur); cur = ""; } else cur += c;
  }
  return parts;
}

const declared = new Map();  // file -> { fields: Map(name -> type), imports: Map(name -> file) } or null (not an object type)
function typeOf(file) {
  if (declared.has(file)) return declared.get(file);
  const text = readFileSync(file, "utf8");
  const imports = new Map();
  for (const m of text.matchAll(/import \{([^}]+)\} from "([^"]+)"/g))
    for (const name of m[1].split(",").map((s) => s.trim()).filter(Boolean)) imports.set(name, declarationFile(m[2], file));
  const body = interfaceBody(text.replace(/\/\*\*[\s\S]*?\*\//g, ""));
  let t = null;
  if (body !== null) {
    const fields = new Map();
    for (const part of splitTopLevel(body)) {
      const m = part.trim().match(/^"([^"]+)"\??:\s*([\s\S]+)$/);
      if (m) fields.set(m[1], m[2].trim());
    }
    t = { fields, imports };
  }
  declared.set(file, t);
  return t;
}

// Checks `value` against a field's type text; pushes "path: field" for each undeclared field.
function checkType(value, typeText, imports, path, errors) {
  const array = typeText.match(/^Array<([\s\S]+)>$/);
  if (array) {
    if (Array.isArray(value)) value.forEach((v, i) => checkType(v, array[1], imports, `${path}[${i}]`, errors));
    return;
  }
  const map = typeText.match(/^\{\s*\[key: string\]:\s*([\s\S]+?);?\s*\}$/);
  if (map) {
    if (value && typeof value === "object") for (const [k, v] of Object.entries(value)) checkType(v, map[1], imports, `${path}.${k}`, errors);
    return;
  }
  const name = typeText.match(/^(I\w+)$/);
  if (name && imports.has(name[1]) && value && typeof value === "object" && !Array.isArray(value)) checkObject(value, imports.get(name[1]), path, errors);
}

function checkObject(value, file, path, errors) {
  const t = typeOf(file);
  if (!t) return;
  for (const [k, v] of Object.entries(value)) {
    if (!t.fields.has(k)) errors.push(`${path}: field "${k}" is not in the API`);
    else checkType(v, t.fields.get(k), t.imports, `${path}.${k}`, errors);
  }
}

// --- Each file of each folder.

const counts = {};
let failed = false;
for (const dir of process.argv.slice(2)) {
  for (const f of readdirSync(dir).filter((f) => f.endsWith(".yaml") && f !== "kustomization.yaml").sort()) {
    const docs = parseAllDocuments(readFileSync(join(dir, f), "utf8"));
    for (const doc of docs) {
      const where = `${join(dir, f)}`;
      if (doc.errors.length) { console.log(`${where}: not YAML: ${doc.errors[0].message}`); failed = true; continue; }
      const obj = doc.toJS();
      const key = `${obj.apiVersion}/${obj.kind}`;
      const module = models[key];
      if (!module) { console.log(`${where}: no schema for ${key}`); failed = true; continue; }
      const cls = (await import(module))[obj.kind];
      const errors = [];
      try { new cls(obj).validate(); } catch (e) { errors.push(e.message); }
      checkObject(obj, declarationFile(module, join(modules, "x")), key, errors);
      if (!existsSync(declarationFile(module, join(modules, "x")))) errors.push(`no declarations for ${module}`);
      if (errors.length) { console.log(`${where}: ${key} ${obj.metadata?.name}: ${errors.join("; ")}`); failed = true; continue; }
      counts[obj.kind] = (counts[obj.kind] ?? 0) + 1;
      console.log(`${where}: ${key} ${obj.metadata.name}: valid`);
    }
  }
}
console.log(`kinds: ${JSON.stringify(counts)}`);
process.exit(failed ? 1 : 0);
