// Validates Kubernetes manifests (a JSON array on stdin) with kubernetes-models and
// @kubernetes-models/prometheus-operator, installed under the node_modules folder given as the
// first argument. Prints [{what, error}] (error null when valid); exits 1 if any is invalid
// or of a kind neither package knows (an unknown kind is an error, never a pass).
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { pathToFileURL } from "node:url";

const modules = process.argv[2];
const docs = JSON.parse(readFileSync(0, "utf8"));

function modulePath(apiVersion, kind) {
  const [group, version] = apiVersion.includes("/") ? apiVersion.split("/") : ["", apiVersion];
  if (group === "monitoring.coreos.com") {
    return join(modules, "@kubernetes-models/prometheus-operator", group, version, kind + ".js");
  }
  return join(modules, "kubernetes-models", group, version, kind + ".js");
}

const results = [];
let bad = false;
for (const doc of docs) {
  const what = `${doc.kind}/${doc.metadata?.namespace ?? ""}/${doc.metadata?.name}`;
  const path = modulePath(String(doc.apiVersion), String(doc.kind));
  let error = null;
  if (!existsSync(path)) {
    error = `no schema for ${doc.apiVersion} ${doc.kind}`;
  } else {
    const mod = await import(pathToFileURL(path).href);
    const Model = mod[doc.kind];
    try {
      new Model(doc).validate();
    } catch (e) {
      error = String(e.message ?? e);
    }
  }
  if (error) bad = true;
  results.push({ what, error });
}
process.stdout.write(JSON.stringify(results));
process.exitCode = bad ? 1 : 0;
