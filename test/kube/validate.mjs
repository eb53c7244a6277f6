// SPDX-License-Identifier: Apache-2.0
// validate.mjs - reads a JSON array of {file, doc} (Kubernetes objects) on
// standard input and checks each against the Kubernetes API's schema with
// kubernetes-models (its models' validate(): types, required fields, enums
// and formats of every field it knows; a field it does not know is not
// reported, as kubeconform without --strict). Prints "valid FILE KIND NAME"
// or "invalid FILE KIND NAME: WHY" for each; exits 1 if any is invalid.
import { readFileSync } from "node:fs";

const items = JSON.parse(readFileSync(0, "utf8"));
let invalid = 0;
for (const { file, doc } of items) {
  const what = `${file} ${doc?.kind} ${doc?.metadata?.name}`;
  let why = null;
  try {
    const mod = await import(`kubernetes-models/${doc.apiVersion}/${doc.kind}`);
    new (mod[doc.kind] ?? mod.default)(doc).validate();
  } catch (e) {
    why = e.code === "ERR_MODULE_NOT_FOUND" || e.code === "ERR_PACKAGE_PATH_NOT_EXPORTED"
      ? `no schema for ${doc?.apiVersion} ${doc?.kind}` : e.message;
  }
  invalid += why !== null;
  console.log(why === null ? `valid ${what}` : `invalid ${what}: ${why}`);
}
process.exit(invalid ? 1 : 0);
