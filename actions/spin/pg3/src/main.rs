//! A command on `spin:postgres@3.0.0`, the interface spin-sdk 3 and 4
//! components import (generated here from Luge's WIT root): the statement
//! on stdin runs on the server at `PG_ADDRESS`, a `SELECT` as a query
//! (its columns on the first line, `name:type`, then each row, values
//! `|`-joined), anything else as an execute (the rows it changed). An
//! error is printed on stderr and the exit status is 1.

mod bindings {
    spin_sdk::wit_bindgen::generate!({
        world: "luge:worlds/postgres3-command",
        path: "../../../wit",
        runtime_path: "::spin_sdk::wit_bindgen::rt",
        generate_all,
    });
}

use std::io::Read;

use bindings::spin::postgres3_0_0::postgres::{Connection, Error};

fn run() -> Result<String, Error> {
    let mut statement = String::new();
    std::io::stdin()
        .read_to_string(&mut statement)
        .map_err(|e| Error::Other(e.to_string()))?;
    let address = std::env::var("PG_ADDRESS").map_err(|e| Error::Other(e.to_string()))?;
    let connection = Connection::open(&address)?;
    if statement
        .trim_start()
        .to_ascii_uppercase()
        .starts_with("SELECT")
    {
        let set = connection.query(&statement, &[])?;
        let mut out: Vec<String> = vec![
            set.columns
                .iter()
                .map(|c| format!("{}:{:?}", c.name, c.data_type))
                .collect::<Vec<_>>()
                .join("|"),
        ];
        for row in set.rows {
            out.push(
                row.iter()
                    .map(|v| format!("{v:?}"))
                    .collect::<Vec<_>>()
                    .join("|"),
            );
        }
        Ok(out.join("\n"))
    } else {
        Ok(connection.execute(&statement, &[])?.to_string())
    }
}

fn main() {
    match run() {
        Ok(out) => print!("{out}"),
        Err(e) => {
            eprintln!("{e:?}");
            std::process::exit(1);
        }
    }
}
