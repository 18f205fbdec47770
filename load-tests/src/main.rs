//! `deltapilot-loadgen`: the load generator (simulated Envoys plus event churn).
//! Built out by the load-generator issue; this entry point only reports that.

fn main() -> anyhow::Result<()> {
    anyhow::bail!("the load generator is not built yet; see the load-generator issue")
}
