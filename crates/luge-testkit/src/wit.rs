//! Components made from Luge's WIT root (wit/), for link tests: a
//! component that imports every function of a world, from
//! `wit-component`'s dummy module. A hand-linked binding that misspells a
//! name or a type fails to pre-instantiate it.

/// A component importing everything the world `world` of Luge's WIT root
/// imports (`host-postgres40`, `host-spin2-mysql`...).
pub fn component_importing(world: &str) -> Vec<u8> {
    let mut resolve = wit_parser::Resolve::default();
    let (package, _) = resolve
        .push_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/../../wit"))
        .expect("Luge's WIT root");
    let world = resolve
        .select_world(&[package], Some(world))
        .unwrap_or_else(|e| panic!("world {world}: {e}"));
    let mut module =
        wit_component::dummy_module(&resolve, world, wit_parser::ManglingAndAbi::Standard32);
    wit_component::embed_component_metadata(
        &mut module,
        &resolve,
        world,
        wit_component::StringEncoding::UTF8,
    )
    .expect("metadata");
    wit_component::ComponentEncoder::default()
        .module(&module)
        .expect("module")
        .validate(true)
        .encode()
        .expect("component")
}
