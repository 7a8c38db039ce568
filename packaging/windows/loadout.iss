; Inno Setup 6 script: the per-user Windows installer for Loadout (no administrator rights asked).
;
; Build dist\Loadout first (python packaging\build.py --torch-index https://download.pytorch.org/whl/cu130),
; then from the repository root:
;
;   iscc /DAppVersion=0.1.0 packaging\windows\loadout.iss                      (CUDA 13.0 build)
;   iscc /DAppVersion=0.1.0 /DFlavorSuffix=-legacy-gpu packaging\windows\loadout.iss   (CUDA 12.6 build)
;
; Output: dist\Loadout-<version>-windows-x64[<suffix>]-setup.exe and its slices
; dist\Loadout-<version>-windows-x64[<suffix>]-setup-1.bin, -2.bin ... (disk spanning: each under
; GitHub's 2 GiB per-asset limit; the artist downloads them into one folder and runs the .exe,
; which checks each slice). Running a newer setup over an installed copy updates it in place, the
; same setup again repairs it. It installs into
; %LOCALAPPDATA%\Programs\Loadout, adds a Start-menu shortcut (and a desktop one if asked) and an
; uninstaller (Settings > Apps, or the Start-menu entry). Settings (registry:
; HKCU\Software\Loadout), cache and demo library live in the user's profile; the uninstaller asks
; whether to remove them too and never touches model folders.

#ifndef AppVersion
  #define AppVersion "0.1.0"
#endif
#ifndef FlavorSuffix
  #define FlavorSuffix ""
#endif
#define AppName "Loadout"
#define AppExe "Loadout.exe"
#define Root AddBackslash(SourcePath) + "..\.."

[Setup]
; one AppId for every version: a newer installer updates the installed app in place
AppId={{6C0E2F4B-5D1A-4E8B-9B3C-2A7F1D0E9C41}
AppName={#AppName}
AppVersion={#AppVersion}
AppVerName={#AppName} {#AppVersion}
AppPublisher=Loadout
AppComments=Browse, load, patch and place Stable Diffusion-family models
DefaultDirName={localappdata}\Programs\{#AppName}
DefaultGroupName={#AppName}
DisableProgramGroupPage=yes
DisableDirPage=auto
; per-user: no UAC prompt, nothing written outside the user's profile
PrivilegesRequired=lowest
ArchitecturesAllowed=x64
ArchitecturesInstallIn64BitMode=x64
MinVersion=10.0
OutputDir={#Root}\dist
OutputBaseFilename=Loadout-{#AppVersion}-windows-x64{#FlavorSuffix}-setup
SetupIconFile={#Root}\build\pack\icons\loadout.ico
UninstallDisplayIcon={app}\{#AppExe}
UninstallDisplayName={#AppName}
WizardStyle=modern
; torch with CUDA is ~4-5 GB unpacked, ~2.5 GB compressed: more than one GitHub release asset may
; hold (2 GiB). Disk spanning cuts the compressed data into .bin slices of at most 2,000,000,000
; bytes (1.86 GiB) beside a small setup.exe; LZMA2 in several threads keeps the build to minutes.
DiskSpanning=yes
DiskSliceSize=2000000000
Compression=lzma2/max
SolidCompression=yes
LZMAUseSeparateProcess=yes
LZMANumBlockThreads=4
CloseApplications=yes
RestartApplications=no

[Languages]
Name: "english"; MessagesFile: "compiler:Default.isl"

[Tasks]
Name: "desktopicon"; Description: "{cm:CreateDesktopIcon}"; GroupDescription: "{cm:AdditionalIcons}"; Flags: unchecked

[InstallDelete]
; an update replaces the whole bundle: no stale library from an older version stays behind
Type: filesandordirs; Name: "{app}\_internal"

[Files]
Source: "{#Root}\dist\Loadout\*"; DestDir: "{app}"; Flags: ignoreversion recursesubdirs createallsubdirs

[Icons]
Name: "{userprograms}\{#AppName}"; Filename: "{app}\{#AppExe}"; WorkingDir: "{app}"; Comment: "Browse, load and patch your models"
Name: "{userprograms}\{#AppName} demo"; Filename: "{app}\{#AppExe}"; Parameters: "--demo"; WorkingDir: "{app}"; Comment: "Open Loadout on a small demo library"
Name: "{userdesktop}\{#AppName}"; Filename: "{app}\{#AppExe}"; WorkingDir: "{app}"; Tasks: desktopicon

[Run]
Filename: "{app}\{#AppExe}"; Description: "{cm:LaunchProgram,{#AppName}}"; Flags: nowait postinstall skipifsilent

[UninstallDelete]
; files the app never writes here; listed so the folder goes away even if something was added
Type: filesandordirs; Name: "{app}\_internal"
Type: dirifempty; Name: "{app}"

[Code]
{ Ask at uninstall whether to remove settings, cache, the queue and the demo library as well.
  Paths as Qt's QStandardPaths and QSettings give them on Windows. Own models are kept. }
procedure CurUninstallStepChanged(CurUninstallStep: TUninstallStep);
var
  Data, Queue: String;
begin
  if CurUninstallStep = usPostUninstall then
  begin
    if UninstallSilent then
      exit;
    if MsgBox('Also remove Loadout''s settings, cache, queue and demo library?' + #13#10 +
              '(Model files, model folders and your pictures are never removed.)',
              mbConfirmation, MB_YESNO or MB_DEFBUTTON2) = IDYES then
    begin
      RegDeleteKeyIncludingSubkeys(HKCU, 'Software\Loadout');
      DelTree(ExpandConstant('{localappdata}\cache\Loadout'), True, True, True);
      Data := ExpandConstant('{localappdata}\Loadout');
      DelTree(Data + '\demo-library', True, True, True);
      { the own models folder only if it is empty }
      RemoveDir(Data + '\models');
      RemoveDir(Data);
      { the queue file: Qt's AppDataLocation, %APPDATA%\Loadout\Loadout }
      Queue := ExpandConstant('{userappdata}\Loadout\Loadout');
      DeleteFile(Queue + '\queue.sqlite');
      DeleteFile(Queue + '\queue.sqlite-wal');
      DeleteFile(Queue + '\queue.sqlite-shm');
      DeleteFile(Queue + '\queue.sqlite-journal');
      RemoveDir(Queue);
      RemoveDir(ExpandConstant('{userappdata}\Loadout'));
    end;
  end;
end;
