//! Whole files to documents: multi-document streams, file-level and document-level
//! failures, and the locations they report.

use super::*;

fn mk_parse(text: &str) -> Result<ParsedFile, FileProblem> {
    parse_file(Path::new("/watch/mesh.yaml"), text)
}

fn objects(p: &ParsedFile) -> Vec<String> {
    p.docs
        .iter()
        .filter_map(|d| match d {
            DocOutcome::Object(o) => Some(o.id.to_string()),
            _ => None,
        })
        .collect()
}

const MULTI: &str = "\
# a comment before the first document
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: a}
spec: {hosts: [a.example.com], resolution: STATIC, endpoints: [{address: 10.0.0.1}]}
---
apiVersion: networking.istio.io/v1beta1
kind: VirtualService
metadata: {name: vs, namespace: shop, annotations: {note: x}}
spec:
  http:
  - route: [{destination: {host: a.example.com}}]
  hosts: [a.example.com]
---
---
apiVersion: networking.istio.io/v1alpha3
kind: DestinationRule
metadata: {name: dr}
spec: {host: a.example.com}
";

#[test]
fn multi_document_files_yield_every_object() {
    let p = mk_parse(MULTI).expect("valid file");
    assert_eq!(
        objects(&p),
        [
            "SERVICE_ENTRY default/a",
            "VIRTUAL_SERVICE shop/vs",
            "DESTINATION_RULE default/dr"
        ]
    );
    assert!(p.problems.is_empty(), "{:?}", p.problems);
    assert!(
        matches!(p.docs[2], DocOutcome::Empty),
        "the empty document between two separators"
    );
    let DocOutcome::Object(vs) = &p.docs[1] else {
        panic!("vs")
    };
    assert_eq!(
        vs.config.spec_json,
        r#"{"hosts":["a.example.com"],"http":[{"route":[{"destination":{"host":"a.example.com"}}]}]}"#
    );
    assert_eq!(
        vs.config.annotations.get("note").map(String::as_str),
        Some("x")
    );
    let DocOutcome::Object(se) = &p.docs[0] else {
        panic!("se")
    };
    assert_eq!((se.services.len(), se.endpoints.len()), (1, 1));
    assert_eq!(se.config.kind, pb::ConfigKind::ServiceEntry as i32);
    assert_eq!(
        se.config.spec_json, r#"{"hosts":["a.example.com"],"resolution":"STATIC"}"#,
        "inline endpoints travel as endpoint entities, not in the carried spec"
    );
}

#[test]
fn an_object_too_large_for_one_event_is_malformed() {
    let big = "x".repeat(MAX_OBJECT_BYTES);
    let text = format!(
        "apiVersion: networking.istio.io/v1\nkind: Sidecar\nmetadata: {{name: s}}\nspec: {{note: {big}}}\n"
    );
    let p = mk_parse(&text).expect("valid YAML");
    assert!(matches!(p.docs[0], DocOutcome::Malformed { id: Some(_) }));
    assert!(p.problems[0].reason.contains("limit"), "{}", p.problems[0]);
}

#[test]
fn invalid_yaml_is_a_file_problem_with_its_line() {
    let text =
        "apiVersion: networking.istio.io/v1\nkind: ServiceEntry\nmetadata: {name: a\nspec: {}\n";
    let e = mk_parse(text).expect_err("unclosed flow mapping");
    assert_eq!(e.kind, ProblemKind::InvalidFile);
    assert_eq!(e.path, Path::new("/watch/mesh.yaml"));
    assert!(e.line.is_some_and(|l| (3..=5).contains(&l)), "{e}");
    let own = format!(
        " at line {} column {}",
        e.line.unwrap_or(0),
        e.column.unwrap_or(0)
    );
    assert!(
        !e.reason.contains(&own),
        "the location is in fields, not repeated: {e}"
    );
    let text = e.to_string();
    assert!(text.starts_with("/watch/mesh.yaml:"), "{text}");
}

#[test]
fn a_syntax_error_in_a_later_document_fails_the_whole_file() {
    let text = format!("{MULTI}---\nkind: [unclosed\n");
    let e = mk_parse(&text).expect_err("bad last doc");
    assert_eq!(e.document, Some(4));
    assert!(e.line.is_some_and(|l| l >= 21), "{e}");
}

#[test]
fn a_malformed_document_is_skipped_with_its_line_and_identity() {
    let text = "\
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: good}
spec: {hosts: [g.example.com]}
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: bad}
spec:
  hosts: [b.example.com]
  ports:
  - number: http
";
    let p = mk_parse(text).expect("file is valid YAML");
    assert_eq!(objects(&p), ["SERVICE_ENTRY default/good"]);
    let DocOutcome::Malformed { id } = &p.docs[1] else {
        panic!("{:?}", p.docs[1])
    };
    assert_eq!(
        id.as_ref().map(ToString::to_string).as_deref(),
        Some("SERVICE_ENTRY default/bad")
    );
    assert_eq!(p.problems.len(), 1);
    let pr = &p.problems[0];
    assert_eq!(
        (pr.kind, pr.document, pr.line),
        (ProblemKind::MalformedDocument, Some(1), Some(12)),
        "{pr}"
    );
    assert!(pr.reason.contains("number"), "{pr}");
}

#[test]
fn checks_after_reading_report_the_document_start_line() {
    let text = "\
kind: Sidecar
apiVersion: networking.istio.io/v1
metadata: {name: ok}
---
# leading comment
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: s}
spec: {hosts: [a.b], resolution: MAGIC}
";
    let p = mk_parse(text).expect("valid YAML");
    assert_eq!(p.problems.len(), 1, "{:?}", p.problems);
    let pr = &p.problems[0];
    assert_eq!(pr.line, Some(6), "{pr}");
    assert!(pr.reason.contains("MAGIC"), "{pr}");
}

#[test]
fn other_kinds_and_groups_are_ignored_and_bad_names_malformed() {
    let text = "\
apiVersion: v1
kind: Service
metadata: {name: k8s}
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: gw}
---
apiVersion: networking.istio.io/v9
kind: Gateway
metadata: {name: future}
---
apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {name: Bad_Name}
---
- just
- a list
";
    let p = mk_parse(text).expect("valid YAML");
    assert!(objects(&p).is_empty());
    let kinds: Vec<ProblemKind> = p.problems.iter().map(|p| p.kind).collect();
    use ProblemKind::*;
    assert_eq!(
        kinds,
        [
            IgnoredDocument,
            IgnoredDocument,
            MalformedDocument,
            MalformedDocument,
            MalformedDocument
        ]
    );
    assert!(
        matches!(&p.docs[2], DocOutcome::Malformed { id: Some(_) }),
        "identity read loosely"
    );
}

#[test]
fn empty_and_comment_only_files_have_no_objects() {
    for text in ["", "# nothing here\n", "---\n", "---\n---\n"] {
        let p = mk_parse(text).expect("valid");
        assert!(objects(&p).is_empty() && p.problems.is_empty(), "{text:?}");
    }
}

#[test]
fn document_start_lines_follow_separators_and_comments() {
    let lines = document_start_lines("a: 1\n---\n# c\n\nb: 2\n---\n- x\n");
    assert_eq!(lines, [Some(1), Some(5), Some(7)]);
}
