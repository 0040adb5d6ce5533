(* Theorem (cubic), end to end: every sequence of the cover (Cubic.cover_pred)
   is one on which the model's logits, in the decomposition's form
   (Softmax.logit, theorem.md section 5), put the max strictly first —
   given exactly what the checker confirms: each claimed good token's two
   checks at the S values it uses (S_c^lo, S_c^hi from the sorted endpoints;
   S = B for c = k-1), and each claimed c = 0 flag.  With Cubic.cubic_count
   the cover has N elements, so the model is correct on at least N sequences.
   Only the standard library. *)
From Coq Require Import Reals Lra Lia List Bool Arith Permutation Sorting.Sorted.
From MaxK Require Import Sums Softmax SubsetSums Counting Classes Cubic.
Import ListNotations.
Open Scope R_scope.

(* position j of the sequence t = q :: l: l's entry j for j < n, q at j = n *)
Definition tokat (n : nat) (t : list nat) (j : nat) : nat :=
  if (j <? n)%nat then nth j (tl t) 0%nat else hd 0%nat t.

Lemma map_nth_seq' : forall (l : list nat) d, map (fun i => nth i l d) (seq 0 (length l)) = l.
Proof.
  intros l d; induction l as [|a l IH]; [reflexivity|].
  simpl length. rewrite <- cons_seq, <- seq_shift, map_cons, map_map. simpl.
  f_equal. exact IH.
Qed.

Lemma length_filter_map : forall (A B : Type) (P : B -> bool) (f : A -> B) (L : list A),
  length (filter P (map f L)) = length (filter (fun x => P (f x)) L).
Proof.
  intros A B P f L; induction L as [|a L IH]; [reflexivity|].
  simpl. destruct (P (f a)); simpl; rewrite IH; reflexivity.
Qed.

Lemma count_lt_full : forall m l, count_lt m l = length l -> forall u, In u l -> (u < m)%nat.
Proof.
  intros m l; unfold count_lt; induction l as [|a l IH]; simpl; intros H u Hu; [contradiction|].
  assert (Hle := count_lt_le m l). unfold count_lt in Hle.
  destruct (Nat.ltb_spec a m); simpl in H.
  - destruct Hu as [->|Hu]; [assumption|]. apply IH; [lia | assumption].
  - lia.
Qed.

Section CubicSound.

Variable v n : nat.
Hypothesis n_pos : (1 <= n)%nat.                    (* n_ctx >= 2 *)
Variables EQKE EQKP EVOU PVOU EU : nat -> nat -> R.  (* EU q o, PVOU i o *)
Variable Dp : nat -> nat -> R.                       (* dp_max[m][o] *)
Hypothesis Dp_ge : forall m i o, (i < n)%nat -> PVOU i o - PVOU i m <= Dp m o.
(* the recorded enclosures of EXP_EQKP and their sorted endpoints *)
Variables blo bhi : nat -> nat -> R.
Variables Ls Hs : nat -> list R.
Hypothesis beta_encl : forall q i, (i < n)%nat -> blo q i <= exp (EQKP q i) <= bhi q i.
Hypothesis Ls_sorted : forall q, Permutation (map (blo q) (seq 0 n)) (Ls q) /\ StronglySorted Rle (Ls q).
Hypothesis Hs_sorted : forall q, Permutation (map (bhi q) (seq 0 n)) (Hs q) /\ StronglySorted Rge (Hs q).
Variable good : nat -> nat -> nat -> list nat.
Variable z : nat -> nat -> bool.

Definition beta_q (q : nat) : nat -> R := fun i => exp (EQKP q i).
Definition e_q (q : nat) : nat -> R := fun t => exp (EQKE q t).
Definition bq_q (q : nat) : R := exp (EQKP q n).

(* the S values the checker uses for (q, c): both extremes, or B when c = k-1 *)
Definition Sends (q c : nat) : R * R :=
  if (c =? n)%nat then (B n (beta_q q), B n (beta_q q))
  else (lsum (firstn c (Ls q)), lsum (firstn c (Hs q))).

(* what the checker confirms for every claimed good token (Cubic.cubic_lemma4
   turns checks (I), (II)/(II') into this) ... *)
Hypothesis good_ok : forall q m c u o,
  (q <= m < v)%nat -> (1 <= c <= cmax q m n)%nat -> In u (good q m c) ->
  (o < v)%nat -> o <> m ->
  f n q m (beta_q q) (bq_q q) (e_q q) (EU q) EVOU PVOU (Dp m) u o (fst (Sends q c)) < 0 /\
  f n q m (beta_q q) (bq_q q) (e_q q) (EU q) EVOU PVOU (Dp m) u o (snd (Sends q c)) < 0.
(* ... and for every claimed c = 0 flag *)
Hypothesis z_ok : forall q m, (q <= m < v)%nat -> z q m = true ->
  forall o, (o < v)%nat -> o <> m ->
  B n (beta_q q) * e_q q m * X m (EU q) EVOU (Dp m) m o
  + bq_q q * e_q q q * Y n q m (EU q) EVOU PVOU o < 0.

Theorem cubic_sound : forall t, In t (seqs v (S n)) -> cover_pred good z t = true ->
  forall o, (o < v)%nat -> o <> list_max t ->
  let q := hd 0%nat t in
  let s := fun j => EQKE q (tokat n t j) + EQKP q j in
  let V := fun j o => EVOU (tokat n t j) o in
  logit s (S n) (EU q) V PVOU o < logit s (S n) (EU q) V PVOU (list_max t).
Proof.
  intros t Ht Hcov o Ho Hom q s V.
  assert (Ht' := Ht). apply In_seqs in Ht'. destruct Ht' as [Hlen HF].
  destruct t as [|q0 l]; [discriminate|]. simpl in Hlen. injection Hlen as Hlen.
  simpl in q. subst q. set (m := list_max (q0 :: l)) in *.
  set (c := count_lt m l).
  set (tok := fun i => nth i l 0%nat).
  assert (Hle : forall i, (i < n)%nat -> (tok i <= m)%nat).
  { intros i Hi. apply list_max_ge. right. apply nth_In. lia. }
  assert (Hqm : (q0 <= m)%nat) by (apply list_max_ge; left; reflexivity).
  assert (Hmv : (m < v)%nat).
  { apply list_max_lt; [discriminate | assumption]. }
  apply sign_form; [lia|].
  (* the sign-form sum is Cubic.Sigma *)
  assert (Hsig : sumR (fun j => exp (s j) * xdiff (EU q0) V PVOU j o m) (S n)
                 = Sigma n q0 m (beta_q q0) (bq_q q0) (e_q q0) (EU q0) EVOU PVOU tok o).
  { unfold Sigma, s, V, xdiff, tokat, Y, Cubic.x, beta_q, bq_q, e_q. simpl sumR.
    rewrite Nat.ltb_irrefl. simpl hd. f_equal.
    - apply sumR_ext. intros i Hi. destruct (Nat.ltb_spec i n); [|lia]. simpl tl.
      unfold tok. rewrite exp_plus. ring.
    - rewrite exp_plus. ring. }
  rewrite Hsig. clear Hsig.
  unfold cover_pred in Hcov. simpl hd in Hcov. simpl tl in Hcov. fold m c in Hcov.
  destruct (Nat.eqb_spec c 0) as [Hc0|Hc0].
  - (* c = 0: every non-query token is m *)
    apply (cubic_c0_sound v n q0 m (beta_q q0) (bq_q q0) (e_q q0) (EU q0) EVOU PVOU (Dp m));
      [ intros; apply exp_pos | intros; apply exp_pos | intros; apply Dp_ge; assumption
      | | | assumption | assumption ].
    + intros i Hi. assert (H := count_lt_zero m l Hc0 (tok i) ltac:(apply nth_In; lia)).
      specialize (Hle i Hi). lia.
    + apply z_ok; [lia | assumption].
  - (* c >= 1 *)
    assert (Hcmax : (c <= cmax q0 m n)%nat).
    { assert (Hcls : cls_is q0 m c (q0 :: l) = true).
      { unfold cls_is. simpl. fold m. rewrite !Nat.eqb_refl. reflexivity. }
      (* c lies in the class ranges (Classes.classes_partition's key bound) *)
      unfold cmax. destruct (Nat.eqb_spec q0 m) as [Heq|Hne].
      - assert (H := count_lt_le m l). unfold c. lia.
      - assert (Hin : In m l).
        { assert (H := list_max_in (q0 :: l) ltac:(discriminate)). fold m in H.
          destruct H as [H|H]; [congruence | assumption]. }
        assert (H := count_lt_in m l Hin). unfold c. lia. }
    assert (Hcov2 := proj1 (covered_iff _ _ _) Hcov). clear Hcov. rename Hcov2 into Hcov.
    assert (Htok : forall i, (i < n)%nat -> tok i = m \/ In (tok i) (good q0 m c)).
    { intros i Hi. destruct (Hcov (tok i) ltac:(apply nth_In; lia)) as [H|H]; [|right; assumption].
      left. specialize (Hle i Hi). lia. }
    (* the placement: positions whose token is not m; it has c elements *)
    set (p := fun i => negb (tok i =? m)%nat).
    assert (Hpc : length (filter p (seq 0 n)) = c).
    { unfold p, tok. rewrite <- Hlen.
      rewrite <- (length_filter_map _ _ (fun u => negb (u =? m)%nat) (fun i => nth i l 0%nat)).
      rewrite map_nth_seq'. unfold c. rewrite count_lt_nonm; [reflexivity|].
      apply Forall_forall. intros u Hu. apply list_max_ge. right; assumption. }
    assert (HSP : SP n m (beta_q q0) tok = sumR (fun i => if p i then beta_q q0 i else 0) n).
    { unfold SP, p. apply sumR_ext. intros i _. destruct (tok i =? m)%nat; reflexivity. }
    assert (Hex : exists i, (i < n)%nat /\ tok i <> m).
    { destruct (filter p (seq 0 n)) as [|i rest] eqn:E; [simpl in Hpc; lia|].
      assert (Hi : In i (filter p (seq 0 n))) by (rewrite E; left; reflexivity).
      apply filter_In in Hi. destruct Hi as [Hi Hp]. apply in_seq in Hi.
      exists i. split; [lia|]. unfold p in Hp. apply negb_true_iff, Nat.eqb_neq in Hp. assumption. }
    eapply (cubic_class_sound v n q0 m (beta_q q0) (bq_q q0) (e_q q0) (EU q0) EVOU PVOU (Dp m))
      with (G := good q0 m c) (Slo := fst (Sends q0 c)) (Shi := snd (Sends q0 c)); eauto.
    + intros; apply exp_pos.
    + intros; apply exp_pos.
    + rewrite HSP. unfold Sends. destruct (Nat.eqb_spec c n) as [Hcn|Hcn].
      * (* c = k-1: every non-query position is in P, S = B *)
        assert (Hall : forall i, (i < n)%nat -> p i = true).
        { intros i Hi. unfold p. apply negb_true_iff, Nat.eqb_neq.
          assert (H := count_lt_full m l ltac:(unfold c in Hcn; lia) (tok i)
                         ltac:(apply nth_In; lia)). lia. }
        rewrite (sumR_ext _ (beta_q q0)) by (intros i Hi; rewrite (Hall i Hi); reflexivity).
        unfold B. simpl. lra.
      * destruct (Ls_sorted q0) as [HpL HsL]. destruct (Hs_sorted q0) as [HpH HsH].
        apply (placement_bounds n (beta_q q0) (blo q0) (bhi q0) p); auto.
        intros i Hi. apply beta_encl; assumption.
    + intros u o' Hu Ho' Hom'. apply good_ok; auto. lia.
Qed.

End CubicSound.
