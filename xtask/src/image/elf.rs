//! Is this file a binary that runs alone in a `FROM scratch` image on linux/amd64?
//!
//! Contract (pure): [`check_static_amd64`] accepts a 64-bit little-endian x86-64 ELF
//! executable without a `PT_INTERP` program header, that is one the kernel starts without a
//! dynamic loader (static or static-pie). Anything else is refused with the reason, because in
//! an image with nothing but the binary a dynamic one fails with a bare "no such file or
//! directory" (its loader is missing) that is hard to read from a pod's status.

/// Why a file cannot be the only file of the image.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NotStatic {
    /// No ELF magic, or too short to hold the headers it claims.
    #[error("not an ELF executable")]
    NotElf,
    /// 32-bit, big-endian or another machine than x86-64.
    #[error("not a 64-bit x86-64 executable (the image is linux/amd64)")]
    WrongMachine,
    /// Has a program interpreter.
    #[error("dynamically linked (needs the loader {0}); build it static")]
    Dynamic(String),
}

const PT_INTERP: u32 = 3;
const EM_X86_64: u16 = 62;

/// Checks that `elf` is a static (or static-pie) x86-64 executable.
pub fn check_static_amd64(elf: &[u8]) -> Result<(), NotStatic> {
    if elf.get(..4) != Some(b"\x7fELF") {
        return Err(NotStatic::NotElf);
    }
    // EI_CLASS 2 = 64-bit, EI_DATA 1 = little-endian.
    if elf.get(4..6) != Some(&[2, 1]) || u16_at(elf, 18) != Some(EM_X86_64) {
        return Err(NotStatic::WrongMachine);
    }
    let (phoff, phentsize, phnum) = (u64_at(elf, 32), u16_at(elf, 54), u16_at(elf, 56));
    let (Some(phoff), Some(phentsize), Some(phnum)) = (phoff, phentsize, phnum) else {
        return Err(NotStatic::NotElf);
    };
    for i in 0..u64::from(phnum) {
        let at =
            usize::try_from(phoff + i * u64::from(phentsize)).map_err(|_| NotStatic::NotElf)?;
        if u32_at(elf, at).ok_or(NotStatic::NotElf)? != PT_INTERP {
            continue;
        }
        let offset = u64_at(elf, at + 8).ok_or(NotStatic::NotElf)? as usize;
        let size = u64_at(elf, at + 32).ok_or(NotStatic::NotElf)? as usize;
        let path = elf
            .get(offset..offset.saturating_add(size))
            .ok_or(NotStatic::NotElf)?;
        let path = String::from_utf8_lossy(path)
            .trim_end_matches('\0')
            .to_string();
        return Err(NotStatic::Dynamic(path));
    }
    Ok(())
}

fn bytes<const N: usize>(b: &[u8], at: usize) -> Option<[u8; N]> {
    b.get(at..at.checked_add(N)?)?.try_into().ok()
}

fn u16_at(b: &[u8], at: usize) -> Option<u16> {
    bytes(b, at).map(u16::from_le_bytes)
}

fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    bytes(b, at).map(u32::from_le_bytes)
}

fn u64_at(b: &[u8], at: usize) -> Option<u64> {
    bytes(b, at).map(u64::from_le_bytes)
}

/// A complete static x86-64 executable that exits 0 (one `PT_LOAD`, three instructions):
/// what the image tests package instead of an operator built in release mode.
#[cfg(test)]
pub fn tiny_static_executable() -> Vec<u8> {
    const BASE: u64 = 0x40_0000;
    // mov eax, 60 (exit); xor edi, edi; syscall
    let code = [0xb8, 60, 0, 0, 0, 0x31, 0xff, 0x0f, 0x05];
    let len = (64 + 56 + code.len()) as u64;
    let mut elf = Vec::new();
    elf.extend_from_slice(b"\x7fELF\x02\x01\x01\0\0\0\0\0\0\0\0\0");
    elf.extend_from_slice(&2u16.to_le_bytes()); // ET_EXEC
    elf.extend_from_slice(&EM_X86_64.to_le_bytes());
    elf.extend_from_slice(&1u32.to_le_bytes()); // EV_CURRENT
    elf.extend_from_slice(&(BASE + 64 + 56).to_le_bytes()); // entry: the code
    elf.extend_from_slice(&64u64.to_le_bytes()); // program headers right after this header
    elf.extend_from_slice(&0u64.to_le_bytes()); // no section headers
    elf.extend_from_slice(&0u32.to_le_bytes()); // flags
    for half in [64u16, 56, 1, 64, 0, 0] {
        // header size, phentsize, phnum, shentsize, shnum, shstrndx
        elf.extend_from_slice(&half.to_le_bytes());
    }
    elf.extend_from_slice(&1u32.to_le_bytes()); // PT_LOAD
    elf.extend_from_slice(&5u32.to_le_bytes()); // R+X
    for word in [0, BASE, BASE, len, len, 0x1000] {
        // offset, vaddr, paddr, filesz, memsz, align
        elf.extend_from_slice(&word.to_le_bytes());
    }
    elf.extend_from_slice(&code);
    elf
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The tiny executable with a `PT_INTERP` header naming `interp` appended.
    fn with_interp(interp: &str) -> Vec<u8> {
        let mut elf = tiny_static_executable();
        let path_at = elf.len() as u64 + 56;
        elf[56..58].copy_from_slice(&2u16.to_le_bytes()); // phnum
        let phoff = elf.len() as u64;
        elf[32..40].copy_from_slice(&phoff.to_le_bytes()); // the new program headers
        // Two headers at the end: PT_INTERP, then a copy of the PT_LOAD (phoff moved).
        let load: Vec<u8> = elf[64..120].to_vec();
        let mut interp_ph = Vec::new();
        interp_ph.extend_from_slice(&PT_INTERP.to_le_bytes());
        interp_ph.extend_from_slice(&4u32.to_le_bytes());
        let size = interp.len() as u64 + 1;
        for word in [path_at + 56, 0, 0, size, size, 1] {
            interp_ph.extend_from_slice(&word.to_le_bytes());
        }
        elf.extend_from_slice(&interp_ph);
        elf.extend_from_slice(&load);
        elf.extend_from_slice(interp.as_bytes());
        elf.push(0);
        elf
    }

    #[test]
    fn only_static_x86_64_executables_pass() {
        let tiny = tiny_static_executable();
        let mut i386 = tiny.clone();
        i386[4] = 1;
        let mut arm64 = tiny.clone();
        arm64[18..20].copy_from_slice(&183u16.to_le_bytes());
        let interp = "/lib64/ld-linux-x86-64.so.2";
        let cases: Vec<(&str, Vec<u8>, Result<(), NotStatic>)> = vec![
            ("static", tiny.clone(), Ok(())),
            ("script", b"#!/bin/sh\n".to_vec(), Err(NotStatic::NotElf)),
            ("empty", Vec::new(), Err(NotStatic::NotElf)),
            ("truncated", tiny[..40].to_vec(), Err(NotStatic::NotElf)),
            ("32-bit", i386, Err(NotStatic::WrongMachine)),
            ("arm64", arm64, Err(NotStatic::WrongMachine)),
            (
                "dynamic",
                with_interp(interp),
                Err(NotStatic::Dynamic(interp.into())),
            ),
        ];
        for (name, elf, expected) in cases {
            assert_eq!(check_static_amd64(&elf), expected, "{name}");
        }
    }

    #[test]
    fn this_test_binary_is_dynamic() {
        let me = std::fs::read(std::env::current_exe().unwrap()).unwrap();
        assert!(matches!(check_static_amd64(&me), Err(NotStatic::Dynamic(p)) if p.contains("ld-")));
    }

    #[test]
    fn the_tiny_executable_runs_and_exits_zero() {
        let dir = std::env::temp_dir().join(format!("xtask-tiny-elf-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("tiny");
        std::fs::write(&path, tiny_static_executable()).unwrap();
        let mut perms = std::fs::metadata(&path).unwrap().permissions();
        std::os::unix::fs::PermissionsExt::set_mode(&mut perms, 0o755);
        std::fs::set_permissions(&path, perms).unwrap();
        // ETXTBSY: another test thread forked while our write handle was open; its child
        // drops the handle at exec, so a retry soon succeeds.
        let status = (0..100)
            .find_map(|_| match std::process::Command::new(&path).status() {
                Err(e) if e.raw_os_error() == Some(26) => None,
                other => Some(other),
            })
            .expect("the file stays busy")
            .unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
        assert!(status.success());
    }
}
