//! The one registry of environment variables (`GPUMPI_*`): each is declared
//! once, typed, with its default and documentation. `docs/ENV.md` lists them.
