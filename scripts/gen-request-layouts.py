#!/usr/bin/env python3
"""Generates crates/protocol/src/guard/layouts.rs: the wire layout of every Kafka request Sluice
decodes, as a compact Rust table for the request guard (crates/protocol/src/guard).

Input: a directory holding Apache Kafka's message specs (the JSON files under
clients/src/main/resources/common/message/ in the Kafka source tree): RequestHeader.json and one
<Name>Request.json per API listed in APIS below. The specs are read, not copied: the output keeps
only what the guard needs (field names, wire types, version ranges, nullability, tags).

    scripts/gen-request-layouts.py KAFKA_MESSAGE_DIR > crates/protocol/src/guard/layouts.rs
    cargo fmt -p sluice-protocol

Version ranges are written open-ended ("3+" stays 3..=i16::MAX) so that a request version newer
than the spec file but identical on the wire (e.g. Produce v12) keeps its layout; the guard's tests
check every supported version against what kafka-protocol decodes, which is the ground truth.
"""

import json
import re
import sys
from pathlib import Path

# The request messages of every API in crates/protocol/src/versions.rs::SUPPORTED.
APIS = [
    "Produce", "Fetch", "ListOffsets", "Metadata", "ApiVersions", "CreateTopics", "DeleteTopics",
    "DescribeConfigs", "AlterConfigs", "CreatePartitions", "IncrementalAlterConfigs",
    "DescribeCluster", "InitProducerId", "FindCoordinator", "JoinGroup", "SyncGroup", "Heartbeat",
    "LeaveGroup", "OffsetCommit", "OffsetFetch", "OffsetDelete", "ListGroups", "DescribeGroups",
    "DeleteGroups", "ConsumerGroupHeartbeat", "ConsumerGroupDescribe", "SaslHandshake",
    "SaslAuthenticate", "DescribeUserScramCredentials", "AlterUserScramCredentials",
    "CreateAcls", "DescribeAcls", "DeleteAcls", "DescribeClientQuotas", "AlterClientQuotas",
    "ShareGroupHeartbeat",
    "ShareGroupDescribe", "ShareFetch", "ShareAcknowledge", "DescribeShareGroupOffsets",
    "AlterShareGroupOffsets", "DeleteShareGroupOffsets",
]

PRIMS = {
    "bool": "Bool", "int8": "Int8", "int16": "Int16", "uint16": "UInt16", "int32": "Int32",
    "uint32": "UInt32", "int64": "Int64", "float64": "Float64", "uuid": "Uuid",
    "string": "String", "bytes": "Bytes", "records": "Records",
}

OPEN = 32767


def strip_comments(text):
    """Drops // comments outside string literals (the specs are JSON with comments)."""
    out, i, in_str = [], 0, False
    while i < len(text):
        c = text[i]
        if in_str:
            out.append(c)
            if c == "\\":
                out.append(text[i + 1])
                i += 1
            elif c == '"':
                in_str = False
        elif c == '"':
            in_str = True
            out.append(c)
        elif text.startswith("//", i):
            while i < len(text) and text[i] != "\n":
                i += 1
            continue
        else:
            out.append(c)
        i += 1
    return "".join(out)


def parse_versions(spec):
    """'3+' -> (3, OPEN); '0-4' -> (0, 4); '7' -> (7, 7); 'none' or None -> None."""
    if spec is None or spec == "none":
        return None
    if spec.endswith("+"):
        return (int(spec[:-1]), OPEN)
    if "-" in spec:
        lo, hi = spec.split("-")
        return (int(lo), int(hi))
    return (int(spec), int(spec))


def snake(name):
    s = re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", name)
    s = re.sub(r"([A-Z]+)([A-Z][a-z])", r"\1_\2", s)
    return s.lower()


def v(r):
    lo, hi = r
    return f"V({lo}, {'MAX' if hi == OPEN else hi})"


class Gen:
    def __init__(self):
        self.structs = []  # (rust name, spec name, [field lines]) in dependency order

    def struct(self, msg, name, fields, common):
        if name == msg:
            rust = f"{snake(msg).upper()}_FIELDS"
        else:
            rust = f"{snake(msg).upper()}_{snake(name).upper()}"
        lines = [self.field(msg, f, common) for f in fields]
        self.structs.append((rust, name, lines))
        return rust

    def field(self, msg, f, common):
        name, ty = f["name"], f["type"]
        versions = parse_versions(f["versions"])
        assert versions is not None, f"{msg}.{name}: no versions"
        is_array = ty.startswith("[]")
        base = ty[2:] if is_array else ty
        if base in PRIMS:
            assert "fields" not in f, f"{msg}.{name}: primitive with fields"
            elem = f"Elem::Prim({PRIMS[base]})"
        else:
            sub = f.get("fields")
            if sub is None:
                sub = common[base]
            elem = f"Elem::Struct(&{self.struct(msg, base, sub, common)})"
        expr = f"Ty::Array({elem})" if is_array else f"Ty::One({elem})"
        out = f'Field::new("{snake(name)}", {expr}, {v(versions)})'
        if f.get("nullableVersions") and parse_versions(f["nullableVersions"]):
            out += ".nullable()"
        if "tag" in f:
            tagged = parse_versions(f.get("taggedVersions"))
            # The guard treats a tagged field as living only in its tagged versions.
            assert tagged == versions, f"{msg}.{name}: taggedVersions {tagged} != versions {versions}"
            out += f".tagged({int(f['tag'])})"
        if "flexibleVersions" in f:
            assert parse_versions(f["flexibleVersions"]) is None, f"{msg}.{name}: field flexibleVersions"
            out += ".classic()"
        return out


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: gen-request-layouts.py KAFKA_MESSAGE_DIR")
    src = Path(sys.argv[1])
    gen = Gen()
    messages = []
    for name in ["RequestHeader"] + [f"{a}Request" for a in APIS]:
        spec = json.loads(strip_comments((src / f"{name}.json").read_text()))
        assert spec["name"] == name, name
        common = {c["name"]: c["fields"] for c in spec.get("commonStructs", [])}
        rust = gen.struct(name, name, spec["fields"], common)
        flexible = parse_versions(spec.get("flexibleVersions"))
        messages.append((name, spec.get("apiKey"), rust, flexible, parse_versions(spec["validVersions"])))

    w = sys.stdout.write
    w("// @generated by scripts/gen-request-layouts.py from Apache Kafka's request message specs\n")
    w("// (RequestHeader.json and the *Request.json of every supported API). Do not edit by hand;\n")
    w("// regenerate with:\n")
    w("//   scripts/gen-request-layouts.py KAFKA/clients/src/main/resources/common/message \\\n")
    w("//       > crates/protocol/src/guard/layouts.rs && cargo fmt -p sluice-protocol\n")
    line = "// Spec files read (their validVersions):"
    for name, _, _, _, valid in messages:
        item = f" {name.removesuffix('Request') or name} {valid[0]}-{valid[1]};"
        if len(line) + len(item) > 100:
            w(line + "\n")
            line = "//"
        line += item
    w(line + "\n\n")
    w("use super::layout::Prim::*;\n")
    w("use super::layout::{Elem, Field, MAX, Message, Struct, Ty, V};\n\n")
    for rust, name, lines in gen.structs:
        w(f'static {rust}: Struct = Struct {{\n    name: "{name}",\n    fields: &[\n')
        for line in lines:
            w(f"        {line},\n")
        w("    ],\n};\n\n")
    header = messages[0]
    flex = v(header[3]) if header[3] else "V::NONE"
    w("/// The request header (versions 1 and 2; version 0 is used by no supported API).\n")
    w(f"pub(crate) static REQUEST_HEADER: Message = Message {{ api_key: -1, flexible: {flex}, body: &{header[2]} }};\n\n")
    w("/// The body of every request the guard knows, by API key.\n")
    w("pub(crate) static REQUESTS: &[Message] = &[\n")
    for name, api_key, rust, flexible, _ in messages[1:]:
        flex = v(flexible) if flexible else "V::NONE"
        w(f"    Message {{ api_key: {api_key}, flexible: {flex}, body: &{rust} }},\n")
    w("];\n")


if __name__ == "__main__":
    main()
